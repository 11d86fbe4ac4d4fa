"""The one front door for verifying a kernel: `check`, and `check_kernel` on top of it.

`check(src, task, reference, child)` is the whole verdict, backend-agnostic: the static
rules, the kernel function to call, the two observed runs over every trial
(`verify.trials`), the parent's judgement (`verify.judge`) and the reasons. A backend
supplies only how its kernel child runs (`KernelChild`): the simulator in the sandbox,
or the device in the sandbox. `check_kernel` adds compiling and the reference for a
hand-written or published kernel (`nkibot verify`, MCP's verify, the Re-profile action).
This module is the only caller of `judge`.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nkibot.redact import redact_model
from nkibot.results import (
    CompileResult,
    ConversionResult,
    Diagnostic,
    KernelInfo,
    Status,
    VerifyResult,
)
from nkibot.task import Task, describe_kernel_args
from nkibot.verify import scratch
from nkibot.verify.client import HarnessReply
from nkibot.verify.guards import jit_functions, static_findings
from nkibot.verify.judge import judge
from nkibot.verify.reference import ReferenceSet
from nkibot.verify.trials import Observed, exchange_bytes, observe

#: The model named in a result no model produced.
MODEL = "none (hand-written kernel)"

#: Runs the kernel child once: (request, its output directory, extra read-only paths) ->
#: its reply. The request is `kernel_request`'s plus the trials; the backend adds where
#: and how the child runs (simulator or device, confinement, environment, time limit).
RunChild = Callable[[dict[str, Any], Path, tuple[Path, ...]], HarnessReply]


class KernelSourceError(ValueError):
    """The kernel file names no usable `@nki.jit` function."""


@dataclass(frozen=True)
class KernelChild:
    """How one backend runs a kernel for one task: all that `check` needs of a backend."""

    run: RunChild
    #: The function to call; None: the file's only `@nki.jit` function.
    function: str | None = None
    kernel_file: str = "kernel.py"
    #: Tests only: lets kernels the static rules forbid reach the sandbox.
    static: bool = True


def resolve_function(src: str, function: str | None) -> str:
    """The kernel function to call: the given one, else the file's only `@nki.jit` one.

    A file that does not parse says where (not "no @nki.jit function found"), and a named
    function the file does not define is refused here, before anything runs.
    """
    try:
        module = ast.parse(src)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise KernelSourceError(f"the kernel file does not parse: {exc.msg} at {where}"
                                ) from exc
    found = jit_functions(src)
    if function is not None:
        defined = {s.name for s in module.body if isinstance(s, ast.FunctionDef)}
        if function not in defined:
            have = f"its @nki.jit functions: {', '.join(found)}" if found else (
                "it has no @nki.jit function")
            raise KernelSourceError(f"the kernel file defines no function `{function}` "
                                    f"({have})")
        return function
    if len(found) == 1:
        return found[0]
    if not found:
        raise KernelSourceError("no @nki.jit function found in the kernel file")
    raise KernelSourceError(f"several @nki.jit functions ({', '.join(found)}): name one "
                            "with KERNEL.py::function")


def kernel_request(src: str, function: str, kernel_file: str) -> dict[str, Any]:
    """The fields every `run_kernel` request carries: the source and what to call."""
    return {"op": "run_kernel", "source": src, "filename": kernel_file, "function": function}


def static_diagnostics(src: str, kernel_file: str) -> list[Diagnostic]:
    """The static rules the source breaks, as diagnostics located in `kernel_file`."""
    return [Diagnostic(rule=f"static:{f.rule}", message=f.reason, file=kernel_file,
                       line=f.line, fix=f.fix or None) for f in static_findings(src)]


def sandbox_reason(reply: HarnessReply) -> str:
    """A named reason for a child that gave no usable reply (crash, hang, memory)."""
    outcome = reply.outcome
    if outcome.timed_out:
        kind = "timeout"
    elif outcome.killed_by_signal in (9, 24) or "memory" in outcome.reason().lower():
        kind = "memory" if outcome.killed_by_signal != 24 else "cpu-limit"
    elif outcome.killed_by_signal is not None:
        kind = "crash"
    else:
        kind = "exit"
    return f"sandbox:{kind} {outcome.reason()}"


def error_diagnostic(error: dict[str, Any], kernel_file: str) -> Diagnostic:
    """A Diagnostic from a child's error claim; every field is checked, none trusted."""
    file = error.get("file")
    file = str(file) if isinstance(file, str) else None
    shown = kernel_file if file and Path(file).name == kernel_file else file
    first = str(error.get("message", "")).strip().splitlines()[:1] or [""]
    line, fix = error.get("line"), error.get("fix")
    return Diagnostic(rule=str(error.get("rule") or "kernel-exception")[:80],
                      message=f"{error.get('type', 'Error')}: {first[0]}"[:500],
                      file=shown, line=line if isinstance(line, int) else None,
                      fix=fix if isinstance(fix, str) else None)


def check(src: str, task: Task, reference: ReferenceSet, child: KernelChild) -> VerifyResult:
    """The verdict on `src` over every trial of `reference`, redacted: the result carries
    user code's exception text, and no secret in it leaves verbatim."""
    if not isinstance(reference, ReferenceSet):
        raise TypeError("check needs the ReferenceSet from compute_reference")
    return redact_model(_check(src, task, reference, child))


def _check(src: str, task: Task, reference: ReferenceSet, child: KernelChild) -> VerifyResult:
    started = time.monotonic()
    static = static_diagnostics(src, child.kernel_file) if child.static else []
    if static:
        return VerifyResult(passed=False, reasons=list(dict.fromkeys(
            d.message for d in static)), diagnostics=static)
    try:
        function = resolve_function(src, child.function)
    except KernelSourceError as exc:
        return VerifyResult(passed=False, reasons=[f"kernel:no-function {exc}"])
    names = [a.name for a in describe_kernel_args(task)]
    readable = (reference.root / "inputs", reference.root / "state")
    base = kernel_request(src, function, child.kernel_file)

    def run_child(fields: dict[str, Any], out_dir: Path) -> HarnessReply:
        return child.run({**base, **fields}, out_dir, readable)

    # Both children of the determinism pair write here: in memory when that fits (`scratch`).
    with scratch.temporary("nkibot-verify-", 2 * exchange_bytes(reference)) as tmp:
        seen = observe(reference, names, run_child, tmp)
    result = _verdict(task, reference, seen, child.kernel_file)
    return result.model_copy(update={"seconds": time.monotonic() - started,
                                     "isolation": list(seen.reply.outcome.isolation)})


def _verdict(task: Task, reference: ReferenceSet, seen: Observed, kernel_file: str
             ) -> VerifyResult:
    reply, run = seen.reply, seen.run
    response = reply.response
    if response is None and not run.outputs:
        tail = reply.outcome.stderr.decode("utf-8", "replace")[-2000:]
        return VerifyResult(passed=False, reasons=[sandbox_reason(reply)], log=tail)
    verdict = judge(task, reference, run)
    reasons, diagnostics = list(verdict.reasons), list(verdict.diagnostics)
    reasons += [f"kernel:unreadable-output {why}" for why in seen.unreadable]
    error = response.get("error") if response is not None else None
    if response is None:
        reasons.insert(0, sandbox_reason(reply))
    elif isinstance(error, dict):
        diag = error_diagnostic(error, kernel_file)
        where = f" on trial {error['trial']}" if error.get("trial") is not None else ""
        reasons.insert(0, f"kernel:error {diag.rule}{where}: {diag.message}")
        diagnostics.insert(0, diag)
    # The verdict is the parent's alone: every trial read back, and nothing amiss.
    passed = verdict.passed and not reasons and len(run.outputs) == len(reference.trials)
    ran_on = (f"device: {response['device']}" if response and response.get("device")
              else f"simulator: {(response or {}).get('simulator')}")
    log = f"{ran_on}; {len(run.outputs)}/{len(reference.trials)} trials ran"
    return VerifyResult(passed=passed, trials=verdict.trials, reasons=reasons,
                        diagnostics=diagnostics, log=log)


class Checker(Protocol):
    """What `check_kernel` needs of a kernel backend (every KernelBackend is one)."""

    name: str
    is_hardware: bool

    def compile(self, src: str, task: Task) -> CompileResult: ...

    def child(self, src: str, task: Task) -> KernelChild: ...


def verdict(compiled: CompileResult, verified: VerifyResult | None) -> tuple[Status, list[str]]:
    """The status and the reasons it was not verified (pure)."""
    if not compiled.ok:
        reasons = [d.message if d.rule.startswith(("static:", "sandbox:"))
                   else f"compile:{d.rule} {d.message}" for d in compiled.diagnostics]
        return "failed", reasons or [f"compile failed: {compiled.log[-300:]}"]
    if verified is None or not verified.passed:
        return "compiled", list(verified.reasons) if verified else ["not verified"]
    return "verified", []


def static_rejection(src: str, target: str, kernel_path: str, function: str,
                     backend: str, model: str = MODEL) -> ConversionResult | None:
    """The failed result for a kernel that breaks a static rule; None when it breaks none.

    Asked before the reference runs: a forbidden kernel needs no trials."""
    static = static_diagnostics(src, Path(kernel_path).name)
    if not static:
        return None
    compiled = CompileResult(ok=False, backend=backend, compiler="nkibot static check",
                             log="\n".join(d.message for d in static), diagnostics=static)
    return ConversionResult(
        status="failed", target=target, backend=backend, hardware=backend == "neuron",
        model=model, kernel=KernelInfo(path=kernel_path, function=function, source=src),
        compile=compiled, reasons=list(dict.fromkeys(d.message for d in static)))


def check_kernel(task: Task, src: str, kernel_path: str, backend: Checker, function: str, *,
                 model: str = MODEL, reference_timeout_s: float | None = None
                 ) -> ConversionResult:
    """Compile, then (if that worked) compute the reference and `check` against it."""
    from nkibot.verify.reference import ReferenceRunError, compute_reference

    started = time.monotonic()
    target = f"{task.source_path}::{task.entry_point}"
    static = static_rejection(src, target, kernel_path, function, backend.name, model)
    if static is not None:
        return static
    compiled = backend.compile(src, task)
    verified: VerifyResult | None = None
    extra: list[str] = []
    if compiled.ok:
        timeout = reference_timeout_s or max(task.compile_timeout_s, 60.0)
        try:
            with compute_reference(task, timeout_s=timeout) as ref:
                verified = check(src, task, ref, backend.child(src, task))
        except ReferenceRunError as exc:
            extra.append(f"reference:failed {exc}")
    status, reasons = verdict(compiled, verified)
    return ConversionResult(
        status=status, target=target, backend=backend.name,
        hardware=backend.is_hardware, simulator=None if backend.is_hardware else (
            compiled.compiler or None), model=model, seconds=time.monotonic() - started,
        kernel=KernelInfo(path=kernel_path, function=function, args=describe_kernel_args(task),
                          source=src),
        compile=compiled, verify=verified, reasons=extra + reasons)


def published(result: ConversionResult, platform: str) -> ConversionResult:
    """The verdict as it leaves: naming its generation, and redacted (it carries user
    code's messages, so no secret in them leaves verbatim)."""
    return redact_model(result.model_copy(update={"platform": platform}))
