"""structlog and stdlib logging, with secrets redacted (nkibot.redact) before any write."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from nkibot.redact import redact, redact_data

_SECRET_KEYS = re.compile(r"(?i)(secret|password|token|private_key|api_key|authorization)")


def scrub(text: str) -> str:
    """Known secrets and key-shaped strings removed (see nkibot.redact)."""
    return redact(text)


def _scrub_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and key != "event":
            event_dict[key] = "[redacted]"
        elif isinstance(value, str):
            event_dict[key] = scrub(value)
        elif isinstance(value, dict | list | tuple):
            event_dict[key] = redact_data(value)
        elif isinstance(value, BaseException):
            event_dict[key] = scrub(repr(value))
    return event_dict


class RedactingFilter(logging.Filter):
    """Redacts stdlib log records (uvicorn, httpx, botocore) as structlog's are."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.msg} ({scrub(repr(record.exc_info[1]))})"
            record.exc_info = record.exc_text = None
        return True


class _StderrLogger:
    """Writes each line to whatever `sys.stderr` is at that moment.

    structlog's PrintLogger keeps the stream it was created with; a CLI run in-process (tests,
    embedding) may swap and close that stream, so look it up at every write instead.
    """

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


def _stderr_logger(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


def configure(level: str = "info", json: bool = True) -> None:
    """Configure structlog once at process start (CLI edge)."""
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level.upper())
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            _scrub_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
