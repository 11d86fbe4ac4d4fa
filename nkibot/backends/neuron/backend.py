"""The neuron KernelBackend: neuronx-cc compile, on-device verify and profile on Trn1.

Every step runs in the sandboxed child (`nkibot.verify.sandbox.run_sandboxed`), pinned
to this worker's NeuronCore with `NEURON_RT_VISIBLE_CORES` and targeting the device's
generation with `NEURON_PLATFORM_TARGET_OVERRIDE` (trn1 by default; trn2/trn3 runners
pass theirs). Compile and profile run
`nkibot.backends.neuron.device`. For verification this backend supplies only how its
kernel child runs (`child`: `nkibot.backends.neuron.trials`, on the pinned core);
`verify.check` runs the trials and the guards, exactly as for the simulator.
Building commands and reading replies are pure functions below.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nkibot.backends.neuron import devices
from nkibot.backends.neuron.device import KERNEL_FILE, find_kernel_name
from nkibot.backends.neuron.neff_cache import NeffCache, cache_key, default_cache_dir
from nkibot.backends.neuron.parse import parse_compiler_log, timeout_diagnostic
from nkibot.backends.neuron.stats import latency_from_samples, speedup
from nkibot.results import CompileResult, Diagnostic, ProfileResult
from nkibot.task import Task
from nkibot.verify.check import KernelChild
from nkibot.verify.client import HarnessReply, run_harness
from nkibot.verify.sandbox import (
    Confinement,
    SandboxOutcome,
    python_module_argv,
    run_sandboxed,
)

#: The default generation; a Trn2/Trn3 runner passes its own (`platform=`).
TARGET = "trn1"
MEASURED_ON = "Trn1 hardware"


def measured_on(platform: str) -> str:
    """`Trn2 hardware`: where this backend's figures come from."""
    return f"{platform.capitalize()} hardware"
DEVICE_MODULE = "nkibot.backends.neuron.device"
#: The kernel child verification runs on the device (the parent names it).
TRIALS_MODULE = "nkibot.backends.neuron.trials"
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxRunner(Protocol):
    def __call__(
        self, argv: list[str], stdin: bytes = b"", *, timeout_s: float,
        memory_mb: int | None = ..., cpu_s: int | None = ...,
        extra_env: dict[str, str] | None = ..., network: bool = ...,
        confinement: Confinement = ...,
    ) -> SandboxOutcome: ...


def _write_limit(request: dict[str, object]) -> int | None:
    """The verification's limit on what the child leaves in its output directory."""
    found = request.get("write_limit")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def device_confinement(workdir: Path) -> Confinement:
    """The compiler runs programs (processes), reads the SDK and uses the Neuron devices."""
    sdk = tuple(p for p in (Path("/opt/aws/neuron"),) if p.exists())
    return Confinement(readable=sdk, writable=(workdir,), processes=True,
                       devices=tuple(sorted(str(d) for d in Path("/dev").glob("neuron*"))))


@dataclass(frozen=True)
class DeviceCommand:
    """One sandboxed child run: what to execute, with which input, environment and limits."""

    argv: list[str]
    stdin: bytes
    env: dict[str, str]
    timeout_s: float
    cpu_s: int


def device_env(core_id: int | None, artifacts: Path,
               tools_dir: Path = devices.NEURON_TOOLS_DIR,
               platform: str = TARGET) -> dict[str, str]:
    """The child's Neuron variables: its one NeuronCore, the target generation, NEFFs' dir."""
    env = {
        "NEURON_PLATFORM_TARGET_OVERRIDE": platform,
        "NKI_ARTIFACTS_DIR": str(artifacts),
        # neuronx-cc is in the interpreter's bin directory, neuron-ls/neuron-bench here.
        "PATH": f"{Path(sys.executable).parent}:{tools_dir}:{_SAFE_PATH}",
    }
    if core_id is not None:
        env["NEURON_RT_VISIBLE_CORES"] = str(core_id)
    return env


def device_command(op: str, src: str, task: Task, workdir: Path, core_id: int | None, *,
                   timeout_s: float, warmup: int = 0, iters: int = 0,
                   platform: str = TARGET) -> DeviceCommand:
    """The neuron_device child for `compile` or `profile` of `src` on `core_id`."""
    artifacts = workdir / "artifacts"
    request = {
        "op": op, "src": src, "task": task.model_dump(mode="json"),
        "artifacts": str(artifacts), "warmup": warmup, "iters": iters,
    }
    return DeviceCommand(
        argv=python_module_argv(DEVICE_MODULE),
        stdin=json.dumps(request).encode(),
        env=device_env(core_id, artifacts, platform=platform),
        timeout_s=timeout_s,
        # neuronx-cc is multi-threaded: CPU seconds can exceed wall seconds several times.
        cpu_s=int(timeout_s * 8) + 10,
    )


def read_reply(outcome: SandboxOutcome) -> dict[str, Any] | None:
    """The child's JSON reply (its last stdout line), or None when it printed none."""
    lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return reply if isinstance(reply, dict) else None


def compiler_label(sdk: Mapping[str, str | None], platform: str = TARGET) -> str:
    cc, nki = sdk.get("neuronx-cc"), sdk.get("nki")
    return f"neuronx-cc {cc or 'unknown'} (nki {nki or 'unknown'}, target {platform})"


def compile_result_from(outcome: SandboxOutcome, timeout_s: float,
                        compiler: str) -> CompileResult:
    """CompileResult from the child's run: the log, located diagnostics, and ok."""
    log = (outcome.stdout + outcome.stderr).decode("utf-8", "replace")
    reply = read_reply(outcome)
    diagnostics: list[Diagnostic] = []
    if outcome.timed_out:
        diagnostics.append(timeout_diagnostic(timeout_s))
    elif reply is None:
        diagnostics.append(Diagnostic(rule="sandbox", message=outcome.reason()))
    # A runtime failure still means the NEFF compiled: ok, with the runtime error noted.
    ok = bool(reply and (reply.get("ok") or reply.get("stage") == "runtime"))
    if reply is not None and not reply.get("ok"):
        parsed = parse_compiler_log(str(reply.get("error") or log), KERNEL_FILE)
        if reply.get("stage") == "runtime":
            parsed = [d.model_copy(update={"severity": "warning"}) for d in parsed]
        diagnostics.extend(parsed or [Diagnostic(rule="compile-error", message=log[-2000:])])
    return CompileResult(ok=ok, log=log, diagnostics=diagnostics, seconds=outcome.seconds,
                         backend="neuron", compiler=compiler)


def _latency(samples: object) -> Any:
    if not isinstance(samples, list) or not samples:
        return None
    return latency_from_samples([float(s) for s in samples])


def profile_result_from(reply: Mapping[str, Any], log: str, warmup: int,
                        platform: str = TARGET) -> ProfileResult:
    """ProfileResult from the child's raw timings (µs); statistics computed here."""
    kernel = _latency(reply.get("kernel_us"))
    device = _latency(reply.get("torch_device_us"))
    cpu = _latency(reply.get("torch_cpu_us"))
    notes = [f"warm-up {warmup}, host wall clock per call for the kernel and both baselines"]
    notes += [f"{key}: {reply[key].strip().splitlines()[-1]}"
              for key in ("kernel_device_error", "torch_device_error", "torch_cpu_error")
              if reply.get(key)]
    return ProfileResult(
        hardware=True, measured_on=measured_on(platform), kernel=kernel, torch_device=device,
        torch_cpu=cpu, speedup_vs_device=speedup(device, kernel),
        speedup_vs_cpu=speedup(cpu, kernel),
        kernel_device_time=_latency(reply.get("kernel_device_us")),
        log="\n".join([*notes, log]).strip(),
    )


class NeuronBackend:
    """Trn1 backend; one instance per runner worker, bound to that worker's NeuronCore."""

    name = "neuron"
    is_hardware = True

    def __init__(self, core_id: int | None, *, compile_timeout_s: float | None = None,
                 profile_timeout_s: float = 900.0, warmup: int = 10, iters: int = 100,
                 memory_mb: int | None = 16384, cache: NeffCache | None = None,
                 sdk: Mapping[str, str | None] | None = None,
                 runner: SandboxRunner = run_sandboxed, platform: str = TARGET) -> None:
        self.core_id = core_id
        #: The generation of the device this backend runs on (trn1/trn2/trn3).
        self.platform = platform
        self.compile_timeout_s = compile_timeout_s
        self.profile_timeout_s = profile_timeout_s
        self.warmup, self.iters = warmup, iters
        self.memory_mb = memory_mb
        self.cache = cache or NeffCache(default_cache_dir())
        self.sdk = dict(sdk) if sdk is not None else devices.sdk_versions()
        self._run = runner

    def _execute(self, cmd: DeviceCommand) -> SandboxOutcome:
        workdir = Path(cmd.env["NKI_ARTIFACTS_DIR"]).parent
        return self._run(cmd.argv, cmd.stdin, timeout_s=cmd.timeout_s,
                         memory_mb=self.memory_mb, cpu_s=cmd.cpu_s, extra_env=cmd.env,
                         confinement=device_confinement(workdir))

    def compile(self, src: str, task: Task) -> CompileResult:
        key = cache_key(src, task.inputs, self.sdk, self.platform)
        if (hit := self.cache.get(key)) is not None:
            result, _ = hit
            return result.model_copy(update={"log": f"NEFF cache hit {key[:12]}\n{result.log}",
                                             "seconds": 0.0})
        timeout = self.compile_timeout_s or task.compile_timeout_s
        with tempfile.TemporaryDirectory(prefix="nkibot-neuron-") as tmp:
            cmd = device_command("compile", src, task, Path(tmp), self.core_id,
                                 timeout_s=timeout)
            outcome = self._execute(cmd)
            result = compile_result_from(outcome, timeout,
                                         compiler_label(self.sdk, self.platform))
            reply = read_reply(outcome) or {}
            if result.ok and reply.get("ok"):
                neff = Path(reply["neff"]) if reply.get("neff") else None
                self.cache.put(key, result, neff)
        return result

    def child(self, src: str, task: Task) -> KernelChild:
        """How `verify.check` runs this kernel: the device child, on this NeuronCore."""
        return KernelChild(run=self._trials, function=_kernel_name(src),
                           kernel_file=KERNEL_FILE)

    def _trials(self, request: dict[str, object], out_dir: Path, readable: tuple[Path, ...]
                ) -> HarnessReply:
        # The Neuron compiler runs programs and the runtime needs the devices.
        devices_seen = tuple(sorted(str(d) for d in Path("/dev").glob("neuron*")))
        with tempfile.TemporaryDirectory(prefix="nkibot-neuron-") as tmp:
            return run_harness(
                {**request, "out_dir": str(out_dir)}, module=TRIALS_MODULE,
                timeout_s=self.profile_timeout_s, memory_mb=self.memory_mb or 16384,
                extra_env=device_env(self.core_id, Path(tmp) / "artifacts",
                                     platform=self.platform),
                runner=self._run, confinement=Confinement(
                    readable=readable, writable=(out_dir,), processes=True,
                    devices=devices_seen, write_limit=_write_limit(request)))

    def profile(self, src: str, task: Task) -> ProfileResult:
        with tempfile.TemporaryDirectory(prefix="nkibot-neuron-") as tmp:
            cmd = device_command("profile", src, task, Path(tmp), self.core_id,
                                 timeout_s=self.profile_timeout_s, warmup=self.warmup,
                                 iters=self.iters, platform=self.platform)
            outcome = self._execute(cmd)
        log = outcome.stderr.decode("utf-8", "replace")[-4000:]
        reply = read_reply(outcome)
        if reply is None or not reply.get("ok"):
            why = outcome.reason() if reply is None else f"kernel failed ({reply.get('stage')})"
            return ProfileResult(hardware=True, measured_on=measured_on(self.platform),
                                 log=f"profile failed: {why}\n{log}")
        return profile_result_from(reply, log, self.warmup, self.platform)

    def estimate(self, src: str, task: Task) -> ProfileResult:
        """The cost model of this device's generation, on the simulator (no device used):
        candidates are ranked by it; a kept one is still measured here."""
        from nkibot.backends.sim import SimBackend

        return SimBackend(function=_kernel_name(src), kernel_file=KERNEL_FILE,
                          platform=self.platform).estimate(src, task)



def _kernel_name(src: str) -> str | None:
    try:
        return find_kernel_name(src)
    except (ValueError, SyntaxError):
        return None  # the verifier reports a missing kernel function itself
