"""The harness parent: run one harness op in the sandbox and read its reply.

Raw bytes become one typed reply at this boundary: the last stdout line, parsed as a JSON
object, or None when the child crashed, hung or wrote none. A kernel child's reply is only
ever a claim (see `protocol.KernelReply`); verdicts come from the files the parent reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nkibot.verify.sandbox import (
    DISK_FULL,
    REFERENCE,
    Confinement,
    SandboxOutcome,
    disk_full_reason,
    python_module_argv,
)
from nkibot.verify.zygote import run as run_confined

HARNESS = "nkibot.verify.harness"


@dataclass(frozen=True)
class HarnessReply:
    """The child's JSON reply (None when it crashed, hung or wrote no JSON) and its outcome."""

    response: dict[str, Any] | None
    outcome: SandboxOutcome

    def failure(self) -> str:
        """One line saying why there is no usable response."""
        if self.response is None:
            return self.outcome.reason()
        error = self.response.get("error")
        if not isinstance(error, dict):
            return "error: the harness reported failure without an error"
        message = str(error.get("message", "unknown error"))
        if DISK_FULL in message:
            return f"{disk_full_reason()}: {message}"
        return f"{error.get('type', 'error')}: {message}"


def run_harness(
    request: dict[str, Any], *, timeout_s: float, memory_mb: int | None = 8192,
    extra_env: dict[str, str] | None = None,
    runner: Callable[..., SandboxOutcome] = run_confined,
    confinement: Confinement = REFERENCE, module: str = HARNESS,
) -> HarnessReply:
    """Run one harness op in the sandbox; never raises for anything the child does.

    `extra_env` carries device pinning (NEURON_RT_VISIBLE_CORES) for the neuron backend;
    `runner` is the sandbox entry point (injectable so backends can be unit-tested; by
    default a torch child forks from the conversion's warm sandbox where it has one,
    `nkibot.verify.zygote`, and every other child starts cold);
    `confinement` names what the child may read and write; `module` is the child to run
    (this harness, or a backend's own kernel child that speaks the same protocol).
    """
    outcome = runner(python_module_argv(module), json.dumps(request).encode(),
                     timeout_s=timeout_s, memory_mb=memory_mb, extra_env=extra_env,
                     confinement=confinement)
    return HarnessReply(parse_reply(outcome), outcome)


def parse_reply(outcome: SandboxOutcome) -> dict[str, Any] | None:
    """The last stdout line as a JSON object, for a child that exited cleanly (within its
    limits: a child whose output directories went over theirs has no usable reply)."""
    if outcome.returncode != 0 or outcome.timed_out or outcome.write_limit_hit is not None:
        return None
    lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        parsed = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
