"""The verdict through `verify.check`, with a backend supplying only its kernel child."""

from __future__ import annotations

from typing import Any

from nkibot.results import VerifyResult
from nkibot.task import Task
from nkibot.verify.check import check


def checked(backend: Any, src: str, task: Task, reference: Any) -> VerifyResult:
    """`check(src, task, reference, backend.child(src, task))`: what the loop's tools do."""
    return check(src, task, reference, backend.child(src, task))
