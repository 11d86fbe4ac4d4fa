"""structlog and stdlib logging, with secrets redacted (nkibot.redact) before any write.

Exceptions are rendered here, once, for both renderers: a plain traceback without local
variables (a frame's locals held the App's private key), put through redaction. The JSON
renderer gets the exception's type, message and stack as fields; the console renderer
prints the same redacted stack.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import MutableMapping
from types import TracebackType
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


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _exc_info(value: Any) -> ExcInfo | None:
    """`exc_info=` as structlog and stdlib accept it: True, an exception, or a triple."""
    if value is True:
        value = sys.exc_info()
    elif isinstance(value, BaseException):
        return type(value), value, value.__traceback__
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], BaseException):
        return value[0], value[1], value[2]
    return None


def render_exception(info: ExcInfo) -> dict[str, str]:
    """Type, message and stack of an exception, redacted; the stack has no locals."""
    etype, value, tb = info
    stack = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
    return {"type": etype.__name__, "message": scrub(str(value)), "stack": scrub(stack)}


def _exception_processor(as_text: bool) -> Any:
    """Replace `exc_info` by a rendered `exception` (a dict for JSON, text for the console)."""

    def processor(_logger: Any, _method: str,
                  event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        info = _exc_info(event_dict.pop("exc_info", None))
        if info is not None:
            rendered = render_exception(info)
            event_dict["exception"] = rendered["stack"] if as_text else rendered
        return event_dict

    return processor


class RedactingFilter(logging.Filter):
    """Redacts stdlib log records (uvicorn, httpx, botocore) as structlog's are."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        info = _exc_info(record.exc_info)
        if info is not None:
            # The formatter prints `exc_text` as the traceback: ours, redacted, no locals.
            record.exc_text = render_exception(info)["stack"]
        record.exc_info = None
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
    # The console renderer's own formatter (rich) prints every frame's locals; it never
    # sees an exception (the processor below renders them), and is plain if it ever did.
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else
        structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            _exception_processor(as_text=not json),
            _scrub_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
