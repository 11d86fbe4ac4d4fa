"""structlog configuration, with secrets scrubbed before anything is written."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

# Values that must never reach a log line, whatever key they hide under.
_SECRET_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{10,}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"(?i)\b(bearer|token)\s+[A-Za-z0-9_\-.=]{16,}"),
]
_SECRET_KEYS = re.compile(r"(?i)(secret|password|token|private_key|api_key|authorization)")


def scrub(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[redacted]", text)
    return text


def _scrub_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and key != "event":
            event_dict[key] = "[redacted]"
        elif isinstance(value, str):
            event_dict[key] = scrub(value)
    return event_dict


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
