"""The sandboxed harness: `python -m nkibot.verify.harness`, one JSON request on stdin.

Ops:
- `describe`: import the reference, report its forward inputs, init args and state_dict;
- `reference`: build each trial's inputs, run the reference (fp32, and natively for
  low-precision inputs), save inputs, state and outputs as `.npy` files;
- `run_kernel`: run a candidate kernel under the simulator on given (or random) inputs,
  save its outputs, and report the dynamic guards it can see (inputs modified,
  determinism). This op never imports torch and never sees expected outputs.

The response is one JSON object on the real stdout. Anything the user's code prints goes
to stderr, because stdout is re-pointed there before any user code runs. The parent side,
`run_harness`, turns a crash, hang or unreadable reply into a `None` response and leaves the
reason to the sandbox outcome.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nkibot.verify.sandbox import SandboxOutcome, python_module_argv, run_sandboxed


@dataclass(frozen=True)
class HarnessReply:
    """The child's JSON reply (None when it crashed, hung or wrote no JSON) and its outcome."""

    response: dict[str, Any] | None
    outcome: SandboxOutcome

    def failure(self) -> str:
        """One line saying why there is no usable response."""
        if self.response is None:
            return self.outcome.reason()
        error = self.response.get("error") or {}
        return f"{error.get('type', 'error')}: {error.get('message', 'unknown error')}"


def run_harness(
    request: dict[str, Any], *, timeout_s: float, memory_mb: int | None = 8192,
    extra_env: dict[str, str] | None = None,
    runner: Callable[..., SandboxOutcome] = run_sandboxed,
) -> HarnessReply:
    """Run one harness op in the sandbox; never raises for anything the child does.

    `extra_env` carries device pinning (NEURON_RT_VISIBLE_CORES) for the neuron backend;
    `runner` is the sandbox entry point (injectable so backends can be unit-tested).
    """
    outcome = runner(
        python_module_argv("nkibot.verify.harness"),
        json.dumps(request).encode(),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        extra_env=extra_env,
    )
    response: dict[str, Any] | None = None
    if outcome.returncode == 0 and not outcome.timed_out:
        lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
        try:
            parsed = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            parsed = None
        response = parsed if isinstance(parsed, dict) else None
    return HarnessReply(response, outcome)


def error_dict(exc: BaseException, kernel_file: str | None = None) -> dict[str, Any]:
    """A structured, JSON-able description of an exception (rule/file/line/fix if known)."""
    frames = traceback.extract_tb(exc.__traceback__)
    file = getattr(exc, "file", None)
    line = getattr(exc, "line", None)
    if isinstance(exc, SyntaxError):
        file, line = exc.filename, exc.lineno
    if line is None and kernel_file is not None:
        for frame in reversed(frames):
            if frame.filename == kernel_file:
                file, line = frame.filename, frame.lineno
                break
    rule = getattr(exc, "rule", None) or "kernel-exception"
    if rule == "kernel-exception" and (
            isinstance(exc, MemoryError) or isinstance(exc.__cause__, MemoryError)
            or "MemoryError" in str(exc)):
        rule = "memory-limit"
    tail = "".join(traceback.format_exception(exc)).strip().splitlines()[-12:]
    return {
        "kind": next((c.__name__ for c in type(exc).__mro__ if c.__name__ in _SIM_KINDS),
                     "exception"),
        "type": type(exc).__name__,
        "message": str(exc)[:2000],
        "rule": str(rule),
        "file": str(file) if file is not None else None,
        "line": int(line) if isinstance(line, int) else None,
        "fix": getattr(exc, "fix", None),
        "traceback": "\n".join(tail),
    }


_SIM_KINDS = frozenset({"ConstraintError", "KernelError"})


def _dispatch(request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op in ("describe", "reference"):
        from nkibot.verify.children import torch_side

        return torch_side.describe(request) if op == "describe" else (
            torch_side.reference(request))
    if op == "run_kernel":
        from nkibot.verify.children import kernel_side

        return kernel_side.run_kernel(request)
    return {"ok": False, "error": {"type": "BadRequest", "message": f"unknown op {op!r}"}}


def main() -> int:
    # `python -I` ignores PYTHONDONTWRITEBYTECODE; never leave __pycache__ in user trees.
    sys.dont_write_bytecode = True
    # Keep the real stdout for the reply; user code printing must not corrupt it.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        response = _dispatch(json.loads(sys.stdin.read()))
    except Exception as exc:  # the reply must describe any failure, whatever raised it
        response = {"ok": False, "error": error_dict(exc)}
    response["torch_loaded"] = "torch" in sys.modules
    reply.write(json.dumps(response, default=str) + "\n")
    reply.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
