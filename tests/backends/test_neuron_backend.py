"""The neuron backend's commands, result assembly and cache, with the sandbox at the seam.

A fake sandbox runner records the command and answers with outputs written to match the
documented formats; the last class runs the real sandboxed child end to end with a
NumPy stand-in kernel, which exercises every step except the NeuronCore itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nkibot.backends.neuron.backend import (
    MEASURED_ON,
    NeuronBackend,
    compiler_label,
    device_command,
    device_env,
    profile_result_from,
)
from nkibot.backends.neuron.neff_cache import NeffCache
from nkibot.task import InputSpec, Task
from nkibot.verify.reference import compute_reference
from nkibot.verify.sandbox import BOOT, SandboxOutcome
from tests.verify.front_door import checked

FIXTURES = Path(__file__).parent / "fixtures"
SDK = {"nki": "0.4.0", "neuronx-cc": "2.22.1"}
REFERENCE = """
import torch

class Add(torch.nn.Module):
    def forward(self, a, b):
        return a + b
"""
# Stands in for an @nki.jit kernel: neuron_device calls it with NumPy arrays, exactly as
# the NKI standalone path calls the real one.
NUMPY_KERNEL = "import numpy as np\n\ndef add_kernel(a, b):\n    return np.add(a, b)\n"


def _task(**kw: Any) -> Task:
    specs = [InputSpec(name="a", shape=(4, 8)), InputSpec(name="b", shape=(4, 8))]
    return Task(reference_source=REFERENCE, entry_point="Add", inputs=specs, **kw)


class FakeSandbox:
    """Records each call and replies with a prepared SandboxOutcome."""

    def __init__(self, reply: dict[str, Any] | None, stderr: str = "", timed_out: bool = False,
                 neff_bytes: bytes | None = None) -> None:
        self.reply, self.stderr, self.timed_out = reply, stderr, timed_out
        self.neff_bytes = neff_bytes
        self.calls: list[dict[str, Any]] = []

    def __call__(self, argv: list[str], stdin: bytes = b"", **kw: Any) -> SandboxOutcome:
        request = json.loads(stdin)
        self.calls.append({"argv": argv, "request": request, **kw})
        reply = dict(self.reply) if self.reply is not None else None
        if reply is not None and self.neff_bytes is not None:
            neff = Path(request["artifacts"]) / "kernel.neff"
            neff.parent.mkdir(parents=True, exist_ok=True)
            neff.write_bytes(self.neff_bytes)
            reply["neff"] = str(neff)
        out = (json.dumps(reply) + "\n").encode() if reply is not None else b""
        return SandboxOutcome(returncode=0 if reply else 1, stdout=out,
                              stderr=self.stderr.encode(), timed_out=self.timed_out,
                              killed_by_signal=None, isolation=["env", "rlimits"], seconds=2.5)


class TestCommands:
    def test_env_pins_core_and_target(self, tmp_path: Path) -> None:
        """The child sees one NeuronCore, the trn1 target, and where to keep the NEFF."""
        env = device_env(5, tmp_path / "artifacts")
        assert env["NEURON_RT_VISIBLE_CORES"] == "5"
        assert env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"
        assert env["NKI_ARTIFACTS_DIR"] == str(tmp_path / "artifacts")
        assert "/opt/aws/neuron/bin" in env["PATH"].split(":")

    def test_no_core_means_no_pinning(self, tmp_path: Path) -> None:
        """Without a core id the runtime chooses, so the variable is not set."""
        assert "NEURON_RT_VISIBLE_CORES" not in device_env(None, tmp_path)

    def test_device_command(self, tmp_path: Path) -> None:
        """The compile command runs the device module isolated, with the task as JSON."""
        cmd = device_command("compile", NUMPY_KERNEL, _task(), tmp_path, 0, timeout_s=120)
        assert cmd.argv[:4] == [sys.executable, "-I", "-c", BOOT]
        assert cmd.argv[5] == "nkibot.backends.neuron.device"
        request = json.loads(cmd.stdin)
        assert request["op"] == "compile" and request["src"] == NUMPY_KERNEL
        assert request["task"]["inputs"][0]["shape"] == [4, 8]
        assert cmd.timeout_s == 120 and cmd.cpu_s > 120

    def test_compiler_label_names_versions(self) -> None:
        """Every result says which compiler and nki version ran, and the target."""
        assert compiler_label(SDK) == "neuronx-cc 2.22.1 (nki 0.4.0, target trn1)"


class TestCompile:
    def test_success_is_cached(self, tmp_path: Path) -> None:
        """A good compile stores the NEFF; the same source again skips the child."""
        fake = FakeSandbox({"ok": True, "kernel": "add_kernel"}, neff_bytes=b"NEFF")
        backend = NeuronBackend(3, cache=NeffCache(tmp_path), sdk=SDK, runner=fake)
        first = backend.compile(NUMPY_KERNEL, _task())
        assert first.ok and first.backend == "neuron" and "2.22.1" in first.compiler
        assert fake.calls[0]["extra_env"]["NEURON_RT_VISIBLE_CORES"] == "3"
        assert fake.calls[0]["timeout_s"] == 120.0
        second = backend.compile(NUMPY_KERNEL, _task())
        assert len(fake.calls) == 1
        assert second.ok and second.log.startswith("NEFF cache hit")
        assert list(tmp_path.rglob("kernel.neff"))

    def test_timeout_is_configurable(self, tmp_path: Path) -> None:
        """The task's compile timeout applies unless the backend overrides it."""
        fake = FakeSandbox({"ok": True})
        NeuronBackend(0, cache=NeffCache(tmp_path), sdk=SDK, runner=fake).compile(
            NUMPY_KERNEL, _task(compile_timeout_s=30))
        NeuronBackend(0, compile_timeout_s=200, cache=NeffCache(tmp_path / "b"), sdk=SDK,
                      runner=fake).compile(NUMPY_KERNEL, _task())
        assert [c["timeout_s"] for c in fake.calls] == [30.0, 200.0]

    def test_compile_error_is_parsed_and_not_cached(self, tmp_path: Path) -> None:
        """A front-end error becomes a located diagnostic; nothing is cached."""
        error = (FIXTURES / "nki_trace_error.log").read_text()
        fake = FakeSandbox({"ok": False, "stage": "compile", "error": error}, stderr=error)
        backend = NeuronBackend(0, cache=NeffCache(tmp_path), sdk=SDK, runner=fake)
        result = backend.compile(NUMPY_KERNEL, _task())
        assert not result.ok
        [diag] = result.diagnostics
        assert (diag.rule, diag.line, diag.file) == ("partition-dim", 14, "kernel.py")
        assert "Partition dimension 256" in result.log
        backend.compile(NUMPY_KERNEL, _task())
        assert len(fake.calls) == 2

    def test_runtime_failure_still_compiled(self, tmp_path: Path) -> None:
        """A NEFF that compiled but failed on the core is ok, with the runtime error as warning."""
        error = (FIXTURES / "nrt_runtime_error.log").read_text()
        fake = FakeSandbox({"ok": False, "stage": "runtime", "error": error})
        result = NeuronBackend(0, cache=NeffCache(tmp_path), sdk=SDK, runner=fake).compile(
            NUMPY_KERNEL, _task())
        assert result.ok
        assert any(d.rule == "out-of-bounds" and d.severity == "warning"
                   for d in result.diagnostics)

    def test_timeout(self, tmp_path: Path) -> None:
        """A killed compile reports the compile-timeout rule."""
        fake = FakeSandbox(None, timed_out=True)
        result = NeuronBackend(0, cache=NeffCache(tmp_path), sdk=SDK, runner=fake).compile(
            NUMPY_KERNEL, _task())
        assert not result.ok and result.diagnostics[0].rule == "compile-timeout"


class TestProfile:
    def test_statistics_and_speedups(self) -> None:
        """Raw timings become p50/p99 latencies and ratio-of-median speedups."""
        reply = json.loads((FIXTURES / "profile_reply.json").read_text())
        prof = profile_result_from(reply, "", warmup=10)
        assert prof.hardware and prof.measured_on == MEASURED_ON == "Trn1 hardware"
        assert prof.kernel is not None and prof.kernel.iterations == 100
        assert (prof.kernel.p50_us, prof.kernel.p99_us, prof.kernel.max_us) == (44.0, 49.0, 400.0)
        assert prof.torch_device is not None and prof.torch_device.p50_us == 122.0
        assert prof.speedup_vs_device == pytest.approx(122.0 / 44.0)
        assert prof.speedup_vs_cpu == pytest.approx(949.0 / 44.0)
        assert prof.kernel_device_time is not None and prof.kernel_device_time.p50_us == 12.5

    def test_missing_baseline_has_no_speedup(self) -> None:
        """Without torch-neuronx the device baseline and its speedup are absent, with why."""
        reply = json.loads((FIXTURES / "profile_reply.json").read_text())
        reply.update(torch_device_us=None, torch_device_error="Traceback\nModuleNotFoundError: "
                     "No module named 'torch_neuronx'")
        prof = profile_result_from(reply, "", warmup=10)
        assert prof.torch_device is None and prof.speedup_vs_device is None
        assert prof.speedup_vs_cpu is not None
        assert "torch_neuronx" in prof.log

    def test_backend_passes_iterations(self) -> None:
        """Warm-up and timed iteration counts reach the child."""
        reply = json.loads((FIXTURES / "profile_reply.json").read_text())
        fake = FakeSandbox(reply)
        prof = NeuronBackend(1, warmup=3, iters=7, sdk=SDK, runner=fake).profile(
            NUMPY_KERNEL, _task())
        assert fake.calls[0]["request"]["warmup"] == 3
        assert fake.calls[0]["request"]["iters"] == 7
        assert prof.kernel is not None

    def test_failed_kernel_has_no_figures(self) -> None:
        """A kernel that fails during profiling yields no latency, and says why."""
        fake = FakeSandbox({"ok": False, "stage": "runtime", "error": "boom"})
        prof = NeuronBackend(1, sdk=SDK, runner=fake).profile(NUMPY_KERNEL, _task())
        assert prof.kernel is None and "runtime" in prof.log


class TestVerify:
    def test_verify_runs_the_device_child_on_the_pinned_core(self) -> None:
        """The backend names its own kernel child (not the simulator's harness), which runs
        the kernel on the device, pinned to its core; the request is the shared one."""
        task = _task()
        with compute_reference(task, timeout_s=120) as reference:
            fake = FakeSandbox(None)
            result = checked(NeuronBackend(2, sdk=SDK, runner=fake), NUMPY_KERNEL, task, reference)
        call = fake.calls[0]
        assert call["argv"][-1] == "nkibot.backends.neuron.trials"
        assert call["request"]["op"] == "run_kernel" and "device" not in call["request"]
        assert call["request"]["function"] == "add_kernel"
        assert call["extra_env"]["NEURON_RT_VISIBLE_CORES"] == "2"
        # No reply from the child is a failed verification naming the sandbox's reason.
        assert not result.passed and result.reasons[0].startswith("sandbox:")

    def test_device_trials_are_judged_like_the_simulator(self) -> None:
        """The real harness child runs the kernel through run_on_device; every trial passes."""
        task = _task()
        with compute_reference(task, timeout_s=120) as reference:
            result = checked(NeuronBackend(0, sdk=SDK), NUMPY_KERNEL, task, reference)
        assert result.passed, result.reasons
        assert len(result.trials) == len(reference.trials)
        assert result.log.startswith("device: neuron")

    def test_wrong_device_kernel_fails_with_statistics(self) -> None:
        """A device kernel that computes the wrong thing fails with per-trial statistics."""
        task = _task()
        wrong = NUMPY_KERNEL.replace("np.add(a, b)", "np.subtract(a, b)")
        with compute_reference(task, timeout_s=120) as reference:
            result = checked(NeuronBackend(0, sdk=SDK), wrong, task, reference)
        assert not result.passed
        assert any(r.startswith("numeric:mismatch") for r in result.reasons)


class TestRealChild:
    """The real sandboxed child, with a NumPy stand-in kernel and torch on CPU."""

    def test_compile_and_profile_plumbing(self, tmp_path: Path) -> None:
        """Compile runs the child and caches; profile returns timings and CPU baseline."""
        backend = NeuronBackend(0, warmup=1, iters=3, cache=NeffCache(tmp_path), sdk=SDK)
        result = backend.compile(NUMPY_KERNEL, _task())
        assert result.ok, result.log
        prof = backend.profile(NUMPY_KERNEL, _task())
        assert prof.kernel is not None and prof.kernel.iterations == 3
        assert prof.torch_cpu is not None and prof.speedup_vs_cpu is not None
        # No torch-neuronx here: the device baseline is missing, and the log says why.
        assert prof.torch_device is None and "torch_device_error" in prof.log

    def test_broken_kernel_is_located(self, tmp_path: Path) -> None:
        """An exception raised by the kernel is reported at its line in kernel.py."""
        bad = ("def add_kernel(a, b):\n    x = 1\n"
               "    raise ValueError('partition dimension 256 exceeds 128')\n")
        result = NeuronBackend(0, cache=NeffCache(tmp_path), sdk=SDK).compile(bad, _task())
        assert not result.ok
        diag = result.diagnostics[0]
        assert diag.rule == "partition-dim" and diag.line == 3
