"""The `sim` KernelBackend: static guards, then the NKI CPU simulator in a sandboxed child.

"Compile" is a trace: the kernel runs once on random inputs of the task's shapes, and a
broken hardware rule (ConstraintError) or any other kernel error becomes a diagnostic
with rule, file, line and fix. For verification this backend supplies only how its
kernel child runs (`child`: the simulator in a torch-free sandbox); `verify.check` runs
the trials and reaches the verdict.
A crash, hang or out-of-memory child is a failed result with the sandbox's reason,
never an exception. Figures from here are never latencies.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.redact import redact, redact_model
from nkibot.results import CompileResult, Diagnostic, ProfileResult
from nkibot.task import Task, describe_kernel_args
from nkibot.verify.check import (
    KernelChild,
    KernelSourceError,
    error_diagnostic,
    kernel_request,
    resolve_function,
    sandbox_reason,
    static_diagnostics,
)
from nkibot.verify.client import HarnessReply, run_harness
from nkibot.verify.protocol import BadArrayFile, read_outputs, save_array
from nkibot.verify.sandbox import Confinement, SandboxOutcome, run_sandboxed

MEASURED_ON = "simulator: not a latency measurement"
#: A verification child runs every trial: a kernel whose one traced run (its compile, child
#: start-up included) took T seconds gets PER_TRIAL_RUNS x T per trial before it is called
#: hung, never less than the base limit and never more than VERIFY_CAP times it.
PER_TRIAL_RUNS = 2.0
VERIFY_CAP = 4.0


def verify_timeout(base: float, trials: int, one_run: float | None) -> float:
    """The wall-clock limit of one verification child (see PER_TRIAL_RUNS)."""
    if one_run is None:
        return base
    return min(VERIFY_CAP * base, max(base, PER_TRIAL_RUNS * max(trials, 1) * one_run))


def _digest(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()


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
                 skip_static: bool = False,
                 runner: Callable[..., SandboxOutcome] = run_sandboxed,
                 platform: str = "trn1") -> None:
        self.function = function
        #: The Trainium generation the simulator applies the rules of (trn1/trn2/trn3).
        self.platform = platform
        self._runner = runner
        self.kernel_file = kernel_file
        self.memory_mb = memory_mb
        self.verify_timeout_s = verify_timeout_s
        #: Seconds of each compiled source's one traced run (by digest), which sizes its
        #: verification children's limit (`verify_timeout`).
        self._one_run: dict[str, float] = {}
        # Tests only: lets crash/hang/memory kernels that the static rules forbid reach
        # the sandbox. Never exposed on the command line.
        self._skip_static = skip_static

    def _static(self, src: str) -> list[Diagnostic]:
        return [] if self._skip_static else static_diagnostics(src, self.kernel_file)

    def _child(self, request: dict[str, Any], out_dir: Path, readable: tuple[Path, ...],
               timeout_s: float) -> HarnessReply:
        """One simulator child, torch-free, reading `readable` and writing only `out_dir`."""
        request = {**request, "out_dir": str(out_dir), "target": self.platform}
        return run_harness(request, timeout_s=timeout_s, memory_mb=self.memory_mb,
                           runner=self._runner, confinement=Confinement(
                               readable=readable, writable=(out_dir,), torch=False,
                               write_limit=_write_limit(request)))

    def _run(self, src: str, function: str, request: dict[str, Any], timeout_s: float,
             out_dir: Path, readable: tuple[Path, ...] = ()) -> HarnessReply:
        return self._child({**kernel_request(src, function, self.kernel_file), **request},
                           out_dir, readable, timeout_s)

    def child(self, src: str, task: Task) -> KernelChild:
        """How `verify.check` runs this kernel: on the simulator, in the sandbox."""
        fixed = self.verify_timeout_s
        base = fixed or task.compile_timeout_s * 2
        one_run = self._one_run.get(_digest(src))

        def run(request: dict[str, Any], out_dir: Path,
                readable: tuple[Path, ...]) -> HarnessReply:
            # a large kernel's ten trials take ten of its runs: sized by the compile's run
            trials = len(request.get("trials") or ())
            limit = fixed or verify_timeout(base, trials, one_run)
            return self._child(request, out_dir, readable, limit)

        return KernelChild(run=run, function=self.function,
                           kernel_file=self.kernel_file, static=not self._skip_static)

    def _random_request(self, task: Task) -> dict[str, Any]:
        args = describe_kernel_args(task)
        return {"random": {"seed": 0, "specs": [a.model_dump() for a in args]},
                "arg_names": [a.name for a in args]}

    # Results carry user code's exception text and stderr back to the model and, through
    # the verdict, to check runs: a secret in them never comes back verbatim.
    def compile(self, src: str, task: Task) -> CompileResult:
        return redact_model(self._compile(src, task))

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
            shapes = _output_shapes(Path(tmp), self._read_limit())
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
        self._one_run[_digest(src)] = seconds
        return CompileResult(ok=True, seconds=seconds, backend=self.name, compiler=compiler,
                             log=f"traced {function} on {compiler}; output shapes {shapes}")

    def simulate(self, src: str, arrays: list[np.ndarray[Any, Any]], names: list[str],
                 *, timeout_s: float = 120.0,
                 random: list[tuple[list[int], str]] | None = None, seed: int = 0) -> SimRun:
        """Run the kernel once in the sandbox; the outputs as the parent read them.

        The inputs are `arrays`, or with `random` ((shape, dtype) per input) seeded random
        ones that the sandboxed child builds itself (`protocol.random_array`): nothing of
        their size is allocated in this process."""
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
            request: dict[str, Any]
            if random is not None:
                request = {"random": {"seed": seed, "specs": [
                    {"shape": list(shape), "dtype": dtype} for shape, dtype in random]},
                           "arg_names": names}
            else:
                inputs = [save_array(inputs_dir / f"in{i}.npy", a)
                          for i, a in enumerate(arrays)]
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
                found = read_outputs(out_dir, 1, max_total=self._read_limit())
            except (BadArrayFile, OSError) as exc:
                return SimRun(error=f"kernel:unreadable-output {exc}")
        outputs = [found[key] for key in sorted(found)]
        return SimRun(outputs=outputs, stats=dict(response.get("stats") or {}),
                      simulator=str(response.get("simulator") or ""))

    def _read_limit(self) -> int:
        """The most bytes read back from a run outside verification (no expected sizes):
        what the child's own memory limit lets it have made."""
        return self.memory_mb * 1024 * 1024

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


def _write_limit(request: dict[str, Any]) -> int | None:
    """The verification's limit on what the child leaves in its output directory
    (`trials.write_limit`, in the request); None elsewhere: the sandbox's default."""
    found = request.get("write_limit")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _output_shapes(directory: Path, limit: int) -> list[list[int]]:
    try:
        found = read_outputs(directory, 1, max_total=limit)
    except (BadArrayFile, OSError):
        return []
    return [list(found[key].shape) for key in sorted(found)]
