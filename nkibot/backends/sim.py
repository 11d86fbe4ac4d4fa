"""The `sim` KernelBackend: static guards, then the NKI CPU simulator in a sandboxed child.

"Compile" is a trace: the kernel runs once on random inputs of the task's shapes, and a
broken hardware rule (ConstraintError) or any other kernel error becomes a diagnostic
with rule, file, line and fix. "Verify" runs every reference trial in two fresh,
torch-free children (`verify.trials`); the parent reads their raw outputs and decides
every guard and the verdict (`verify.judge`).
A crash, hang or out-of-memory child is a failed result with the sandbox's reason,
never an exception. Figures from here are never latencies.
"""

from __future__ import annotations

import ast
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.redact import redact, redact_model
from nkibot.results import CompileResult, Diagnostic, ProfileResult, VerifyResult
from nkibot.task import Task, describe_kernel_args
from nkibot.verify.client import HarnessReply, run_harness
from nkibot.verify.guards import jit_functions, static_findings
from nkibot.verify.judge import judge
from nkibot.verify.protocol import BadArrayFile, read_outputs, save_array
from nkibot.verify.reference import ReferenceSet
from nkibot.verify.sandbox import Confinement, SandboxOutcome, run_sandboxed
from nkibot.verify.trials import Observed, observe

MEASURED_ON = "simulator: not a latency measurement"


class KernelSourceError(ValueError):
    """The kernel file names no usable `@nki.jit` function."""


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


@dataclass
class SimRun:
    """One simulator run of a kernel on given inputs (`error` set when it did not finish)."""

    outputs: list[np.ndarray[Any, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    simulator: str = ""
    error: str | None = None
    line: int | None = None


class SimBackend:
    """KernelBackend on the CPU simulator (see the module docstring)."""

    name = "sim"
    is_hardware = False

    def __init__(self, *, function: str | None = None, kernel_file: str = "kernel.py",
                 memory_mb: int = 4096, verify_timeout_s: float | None = None,
                 skip_static: bool = False, device: str | None = None,
                 extra_env: dict[str, str] | None = None,
                 runner: Callable[..., SandboxOutcome] = run_sandboxed,
                 platform: str = "trn1") -> None:
        self.function = function
        #: The Trainium generation the simulator applies the rules of (trn1/trn2/trn3).
        self.platform = platform
        # The neuron backend reuses this verifier with device="neuron": same trials and
        # guards, the kernel run by the real nki on the pinned NeuronCore.
        self.device = device
        self.extra_env = extra_env
        self._runner = runner
        self.kernel_file = kernel_file
        self.memory_mb = memory_mb
        self.verify_timeout_s = verify_timeout_s
        # Tests only: lets crash/hang/memory kernels that the static rules forbid reach
        # the sandbox. Never exposed on the command line.
        self._skip_static = skip_static

    def _static(self, src: str) -> list[Diagnostic]:
        if self._skip_static:
            return []
        return [Diagnostic(rule=f"static:{f.rule}", message=f.reason, file=self.kernel_file,
                           line=f.line, fix=f.fix or None) for f in static_findings(src)]

    def _confinement(self, out_dir: Path, readable: tuple[Path, ...]) -> Confinement:
        if self.device == "neuron":
            # The Neuron compiler runs programs and the runtime needs the devices.
            devices = tuple(sorted(str(d) for d in Path("/dev").glob("neuron*")))
            return Confinement(readable=readable, writable=(out_dir,), processes=True,
                               devices=devices)
        return Confinement(readable=readable, writable=(out_dir,), torch=False)

    def _run(self, src: str, function: str, request: dict[str, Any], timeout_s: float,
             out_dir: Path, readable: tuple[Path, ...] = ()) -> HarnessReply:
        request = {"op": "run_kernel", "source": src, "filename": self.kernel_file,
                   "function": function, "out_dir": str(out_dir), "device": self.device,
                   "target": self.platform,
                   **request}
        return run_harness(request, timeout_s=timeout_s, memory_mb=self.memory_mb,
                           extra_env=self.extra_env, runner=self._runner,
                           confinement=self._confinement(out_dir, readable))

    def _random_request(self, task: Task) -> dict[str, Any]:
        args = describe_kernel_args(task)
        return {"random": {"seed": 0, "specs": [a.model_dump() for a in args]},
                "arg_names": [a.name for a in args]}

    # Results carry user code's exception text and stderr back to the model and, through
    # the verdict, to check runs: a secret in them never comes back verbatim.
    def compile(self, src: str, task: Task) -> CompileResult:
        return redact_model(self._compile(src, task))

    def verify(self, src: str, task: Task, reference: ReferenceSet) -> VerifyResult:
        return redact_model(self._verify(src, task, reference))

    def profile(self, src: str, task: Task) -> ProfileResult:
        return redact_model(self._profile(src, task))

    def estimate(self, src: str, task: Task) -> ProfileResult:
        """The cost model's figures alone, cheaply: no numerics run, nothing verified.

        The same inputs and model as `profile`, so its `model` agrees with a profile's; the
        optimize phase ranks candidates by it before spending a verification on any.
        """
        static = self._static(src)
        if static:
            return ProfileResult(hardware=False, measured_on=MEASURED_ON,
                                 log="; ".join(d.message for d in static)[:1000])
        return redact_model(self._profile(src, task, cost_only=True))

    def _compile(self, src: str, task: Task) -> CompileResult:
        started = time.monotonic()
        static = self._static(src)
        if static:
            return CompileResult(ok=False, diagnostics=static, backend=self.name,
                                 compiler="nkibot static check", log="\n".join(
                                     d.message for d in static))
        try:
            function = resolve_function(src, self.function)
        except KernelSourceError as exc:
            return CompileResult(ok=False, log=str(exc), backend=self.name, diagnostics=[
                Diagnostic(rule="no-kernel", message=str(exc), file=self.kernel_file)])
        with tempfile.TemporaryDirectory(prefix="nkibot-compile-") as tmp:
            reply = self._run(src, function, self._random_request(task),
                              task.compile_timeout_s, Path(tmp))
            shapes = _output_shapes(Path(tmp))
        seconds = time.monotonic() - started
        response = reply.response
        if response is None:
            reason = sandbox_reason(reply)
            return CompileResult(ok=False, log=reason, seconds=seconds, backend=self.name,
                                 diagnostics=[Diagnostic(rule=reason.split()[0],
                                                         message=reason)])
        compiler = str(response.get("simulator") or "nkibot-sim")
        error = response.get("error")
        if error:
            diag = error_diagnostic(error, self.kernel_file)
            log = f"{diag.message}\n{error.get('traceback', '')}".strip()
            return CompileResult(ok=False, log=log,
                                 diagnostics=[diag], seconds=seconds, backend=self.name,
                                 compiler=compiler)
        return CompileResult(ok=True, seconds=seconds, backend=self.name, compiler=compiler,
                             log=f"traced {function} on {compiler}; output shapes {shapes}")

    def _verify(self, src: str, task: Task, reference: ReferenceSet) -> VerifyResult:
        if not isinstance(reference, ReferenceSet):
            raise TypeError("SimBackend.verify needs the ReferenceSet from compute_reference")
        started = time.monotonic()
        static = self._static(src)
        if static:
            return VerifyResult(passed=False, reasons=list(dict.fromkeys(
                d.message for d in static)), diagnostics=static)
        try:
            function = resolve_function(src, self.function)
        except KernelSourceError as exc:
            return VerifyResult(passed=False, reasons=[f"kernel:no-function {exc}"])
        names = [a.name for a in describe_kernel_args(task)]
        timeout = self.verify_timeout_s or task.compile_timeout_s * 2
        readable = (reference.root / "inputs", reference.root / "state")

        def run_child(fields: dict[str, Any], out_dir: Path) -> HarnessReply:
            return self._run(src, function, fields, timeout, out_dir, readable)

        with tempfile.TemporaryDirectory(prefix="nkibot-verify-") as tmp:
            seen = observe(reference, names, run_child, Path(tmp))
        result = self._judge(task, reference, seen)
        return result.model_copy(update={"seconds": time.monotonic() - started,
                                         "isolation": list(seen.reply.outcome.isolation)})

    def _judge(self, task: Task, reference: ReferenceSet, seen: Observed) -> VerifyResult:
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
            diag = error_diagnostic(error, self.kernel_file)
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

    def simulate(self, src: str, arrays: list[np.ndarray[Any, Any]], names: list[str],
                 *, timeout_s: float = 120.0) -> SimRun:
        """Run the kernel once on `arrays` in the sandbox; the outputs as the parent read them."""
        try:
            function = resolve_function(src, self.function)
        except KernelSourceError as exc:
            return SimRun(error=str(exc))
        static = self._static(src)
        if static:
            return SimRun(error="; ".join(d.message for d in static))
        with tempfile.TemporaryDirectory(prefix="nkibot-simulate-") as tmp:
            inputs_dir, out_dir = Path(tmp) / "inputs", Path(tmp) / "out"
            inputs_dir.mkdir()
            out_dir.mkdir()
            inputs = [save_array(inputs_dir / f"in{i}.npy", a) for i, a in enumerate(arrays)]
            request = {"trials": [{"index": 0, "inputs": inputs}], "state": []}
            reply = self._run(src, function, request, timeout_s, out_dir, (inputs_dir,))
            response = reply.response
            if response is None:
                return SimRun(error=sandbox_reason(reply))
            if isinstance(response.get("error"), dict):
                diag = error_diagnostic(response["error"], self.kernel_file)
                return SimRun(error=redact(f"{diag.rule}: {diag.message}"), line=diag.line,
                              simulator=str(response.get("simulator") or ""))
            try:
                found = read_outputs(out_dir, 1)
            except (BadArrayFile, OSError) as exc:
                return SimRun(error=f"kernel:unreadable-output {exc}")
        outputs = [found[key] for key in sorted(found)]
        return SimRun(outputs=outputs, stats=dict(response.get("stats") or {}),
                      simulator=str(response.get("simulator") or ""))

    def _profile(self, src: str, task: Task, cost_only: bool = False) -> ProfileResult:
        try:
            function = resolve_function(src, self.function)
        except KernelSourceError as exc:
            return ProfileResult(hardware=False, measured_on=MEASURED_ON, log=str(exc))
        with tempfile.TemporaryDirectory(prefix="nkibot-profile-") as tmp:
            request = {**self._random_request(task), "cost_model": self.platform,
                       "cost_only": cost_only}
            reply = self._run(src, function, request, task.compile_timeout_s, Path(tmp))
        response = reply.response
        if response is None or response.get("error"):
            why = sandbox_reason(reply) if response is None else str(response["error"])
            return ProfileResult(hardware=False, measured_on=MEASURED_ON, log=why[:1000])
        return ProfileResult(hardware=False, measured_on=MEASURED_ON,
                             sim_stats=dict(response.get("stats") or {}),
                             model=dict(response.get("model") or {}),
                             log=f"simulator: {response.get('simulator')}")


def _output_shapes(directory: Path) -> list[list[int]]:
    try:
        found = read_outputs(directory, 1)
    except (BadArrayFile, OSError):
        return []
    return [list(found[key].shape) for key in sorted(found)]
