"""Redaction of every text nkibot publishes: known secret values and key-shaped strings.

A leaf (no nkibot imports). The process registers its own secrets at start
(`register`, from Settings); `redact` then removes them, and anything shaped like a
credential whoever it belongs to: PEM blocks, GitHub tokens, AWS access key ids,
Anthropic keys, JWTs, and long opaque values after key-ish names (`secret=...`,
`"api_key": "..."`). It is applied where text leaves the process: the GitHub client's
transport (check runs, comments, PR bodies, commits), the log pipeline, and the
verdicts the CLIs print. Redaction is a backstop: the sandbox keeps secrets out of
user code's reach in the first place.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any, Protocol, Self, TypeVar

MARK = "[redacted]"
#: Shorter values are not registered: redacting "1" or "abc" everywhere helps nobody.
MIN_SECRET_LEN = 8

_PATTERNS = (
    re.compile(r"-----BEGIN [A-Z0-9 ]*-----.*?(?:-----END [A-Z0-9 ]*-----|\Z)", re.S),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\b(?:bearer|token)\s+[A-Za-z0-9_\-.=+/]{16,}"),
)
#: `name = value` / `"name": "value"` where the name says secret and the value is opaque.
_KEYISH = re.compile(
    r"(?i)((?:secret|passw(?:or)?d|token|api[_-]?key|private[_-]?key|access[_-]?key|"
    r"credential|authorization)[A-Za-z0-9_\-]*[\"']?\s*[:=]\s*[\"']?)([A-Za-z0-9+/=_\-.]{16,})")

_lock = threading.Lock()
_known: set[str] = set()


def register(values: Iterable[str | None]) -> None:
    """Remember secret values (and their usual encodings) so `redact` removes them."""
    with _lock:
        for value in values:
            if not value or len(value.strip()) < MIN_SECRET_LEN:
                continue
            value = value.strip()
            variants = {value, value.replace("\n", "\\n"), value.replace("\\n", "\n")}
            # A PEM key leaks line by line as easily as whole: each body line is a secret.
            variants |= {ln.strip() for ln in value.replace("\\n", "\n").splitlines()
                         if len(ln.strip()) >= 16 and not ln.startswith("-----")}
            _known.update(v for v in variants if len(v) >= MIN_SECRET_LEN)


def forget_all() -> None:
    """Drop every registered value (tests; a process keeps its secrets for its lifetime)."""
    with _lock:
        _known.clear()


def redact(text: str) -> str:
    """`text` with registered secrets and key-shaped strings replaced by `[redacted]`."""
    if not text:
        return text
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for value in known:
        if value in text:
            text = text.replace(value, MARK)
    for pattern in _PATTERNS:
        text = pattern.sub(MARK, text)
    return _KEYISH.sub(lambda m: f"{m.group(1)}{MARK}", text)


def redact_data(value: Any) -> Any:
    """Redact every string inside JSON-like data (dict values, list items; keys too)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_data(v) for v in value)
    return value


class _Model(Protocol):
    def model_dump(self) -> dict[str, Any]: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...


M = TypeVar("M", bound=_Model)


def redact_model(model: M) -> M:
    """A copy of a pydantic result with every string in it redacted (verdicts, logs)."""
    return type(model).model_validate(redact_data(model.model_dump()))
