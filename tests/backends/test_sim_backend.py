"""The `sim` KernelBackend: compile as a simulator trace, verify over trials, profile."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nkibot.backends.base import KernelBackend
from nkibot.backends.sim import MEASURED_ON, VERIFY_CAP, SimBackend, verify_timeout
from nkibot.task import InputSpec, Task
from nkibot.verify.reference import ReferenceSet, compute_reference
from nkibot.verify.sandbox import SandboxOutcome, run_sandboxed
from tests.verify.front_door import checked

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


def _src(name: str) -> str:
    return (KERNELS / name).read_text()


def _task(ref: str, *, dtype: str = "float32", **fields: object) -> Task:
    path = KERNELS / ref
    return Task.model_validate({
        "reference_source": path.read_text(), "entry_point": "Model", "source_path": ref,
        "reference_file": str(path), "has_get_inputs": True,
        "inputs": [InputSpec(name="x", shape=(256, 64), dtype=dtype)],  # type: ignore[arg-type]
        **fields})


@pytest.fixture(scope="module")
def relu_task() -> Task:
    return _task("relu_ref.py", compile_timeout_s=20)


@pytest.fixture(scope="module")
def relu_ref(relu_task: Task) -> Iterator[ReferenceSet]:
    with compute_reference(relu_task) as ref:
        yield ref


class TestCompile:
    def test_correct_kernel(self, relu_task: Task) -> None:
        """A correct kernel traces on the simulator and says which one ran."""
        backend = SimBackend()
        assert isinstance(backend, KernelBackend) and not backend.is_hardware
        result = backend.compile(_src("relu_ok.py"), relu_task)
        assert result.ok, result.log
        assert result.compiler == "nkibot-sim" and result.backend == "sim"
        assert "[256, 64]" in result.log

    def test_constraint_error_is_a_located_diagnostic(self, relu_task: Task) -> None:
        """A broken hardware rule comes back with rule, file, line and fix."""
        result = SimBackend().compile(_src("partition_too_big.py"), relu_task)
        assert not result.ok
        diag = result.diagnostics[0]
        assert (diag.rule, diag.file, diag.line) == ("partition-dim", "kernel.py", 10)
        assert diag.fix and "128" in diag.fix and "256" in diag.message

    def test_static_rules_first(self, relu_task: Task) -> None:
        """A forbidden import fails compile without running anything, at its line."""
        result = SimBackend().compile(_src("imports_torch.py"), relu_task)
        assert not result.ok and result.compiler == "nkibot static check"
        assert [(d.rule, d.line) for d in result.diagnostics] == [
            ("static:import-not-allowed", 5)]

    def test_no_jit_function(self, relu_task: Task) -> None:
        """Source without an @nki.jit function says so."""
        result = SimBackend().compile("import numpy as np\n", relu_task)
        assert not result.ok and result.diagnostics[0].rule == "no-kernel"


class TestVerify:
    def test_correct_kernel_passes(self, relu_task: Task, relu_ref: ReferenceSet) -> None:
        """A correct kernel passes every trial, including the stress trials."""
        result = checked(SimBackend(), _src("relu_ok.py"), relu_task, relu_ref)
        assert result.passed, result.reasons
        assert len(result.trials) == 10 and all(t.passed for t in result.trials)
        assert [t.label.split(",")[0] for t in result.trials[5:8]] == [
            "large magnitude", "offset +100", "offset -100"]
        assert result.trials[-2].label.startswith("overflow scale")
        assert result.trials[-1].label == "special values"
        assert {"env", "tmpdir", "rlimits"} <= set(result.isolation)

    def test_runtime_error_names_trial(self, relu_task: Task, relu_ref: ReferenceSet) -> None:
        """A constraint error during verify is a reason with the rule and trial."""
        result = checked(SimBackend(), _src("partition_too_big.py"), relu_task, relu_ref)
        assert not result.passed
        # Trials run in a secret shuffled order: the first one run is the one named.
        assert re.match(r"kernel:error partition-dim on trial \d+: ", result.reasons[0])
        assert result.diagnostics[0].line == 10

    def test_crash_then_carry_on(self, relu_task: Task, relu_ref: ReferenceSet) -> None:
        """A segfaulting kernel is a failed result with the reason; the next run works."""
        crashed = checked(SimBackend(skip_static=True), _src("crash.py"), relu_task, relu_ref)
        assert not crashed.passed
        assert crashed.reasons[0].startswith("sandbox:crash")
        assert "segmentation fault" in crashed.reasons[0]
        assert checked(SimBackend(), _src("relu_ok.py"), relu_task, relu_ref).passed

    def test_memory_hog(self, relu_task: Task, relu_ref: ReferenceSet) -> None:
        """A kernel that allocates past the memory limit fails with a memory reason."""
        result = checked(SimBackend(), _src("memory_hog.py"), relu_task, relu_ref)
        assert not result.passed
        assert "memory-limit" in result.reasons[0]

    def test_hang_times_out(self, relu_task: Task) -> None:
        """A kernel that never returns is killed at the compile timeout."""
        task = relu_task.model_copy(update={"compile_timeout_s": 2.0})
        result = SimBackend().compile(_src("hang.py"), task)
        assert not result.ok
        assert result.diagnostics[0].rule in ("sandbox:timeout", "sandbox:cpu-limit")
        assert result.seconds < 15

    def test_verify_limit_grows_with_the_kernels_own_run(self) -> None:
        """A verification child's limit: the base until ten of the kernel's runs (twice
        over) need more, then that, up to VERIFY_CAP times the base."""
        assert verify_timeout(240.0, 10, None) == 240.0
        assert verify_timeout(240.0, 10, 3.0) == 240.0
        assert verify_timeout(240.0, 10, 15.0) == 300.0
        assert verify_timeout(240.0, 10, 100.0) == VERIFY_CAP * 240.0

    def test_verify_children_get_the_limit_the_compile_measured(
            self, relu_task: Task, relu_ref: ReferenceSet) -> None:
        """The compile's traced run sizes the verification children's limit (a kernel of
        14 s a run was killed at 240 s on its seventh trial of ten): every child of the
        verification runs under verify_timeout(base, trials, the compile's seconds)."""
        seen: list[tuple[float, int]] = []

        def recording(argv: list[str], stdin: bytes = b"", **kw: object) -> SandboxOutcome:
            trials = len(json.loads(stdin or b"{}").get("trials") or ())
            seen.append((float(kw["timeout_s"]), trials))  # type: ignore[arg-type]
            if len(seen) == 1:  # the compile: a kernel of over a second a run, on any host
                time.sleep(1.0)
            return run_sandboxed(argv, stdin, **kw)  # type: ignore[arg-type]

        task = relu_task.model_copy(update={"compile_timeout_s": 5.0})
        backend = SimBackend(runner=recording)
        compiled = backend.compile(_src("relu_ok.py"), task)
        assert compiled.ok and seen[0][0] == 5.0
        result = checked(backend, _src("relu_ok.py"), task, relu_ref)
        assert result.passed, result.reasons
        children = seen[1:]
        assert len(children) == 2 and all(n == len(relu_ref.trials) for _, n in children)
        want = verify_timeout(10.0, len(relu_ref.trials), compiled.seconds)
        assert want >= 20.0  # 2 x ten trials x over a second: over the base of 10
        assert all(limit == want for limit, _ in children)

    def test_needs_reference_set(self, relu_task: Task) -> None:
        """Verify refuses anything but a ReferenceSet (a programming error)."""
        with pytest.raises(TypeError):
            checked(SimBackend(), _src("relu_ok.py"), relu_task, object())


class TestPrecisionAndTinyReferences:
    def test_bf16_kernel(self) -> None:
        """A bf16 ReLU matches the fp32 reference within bf16 tolerance and dtype."""
        task = _task("relu_ref.py", dtype="bfloat16", seeds=[0, 1])
        with compute_reference(task) as ref:
            result = checked(SimBackend(), _src("relu_ok.py"), task, ref)
        assert result.passed, result.reasons
        assert {t.actual_dtype for t in result.trials} == {"bfloat16"}
        assert result.trials[0].atol == pytest.approx(2e-2)

    def test_tiny_reference(self) -> None:
        """A tiny reference is compared relatively: zeros fail, the real kernel passes."""
        task = _task("tiny_ref.py", seeds=[0, 1])
        with compute_reference(task) as ref:
            zeros = checked(SimBackend(), _src("zeros.py"), task, ref)
            good = checked(SimBackend(), _src("tiny_ok.py"), task, ref)
        assert not zeros.passed
        assert "reference:near-constant (compared relatively)" in zeros.reasons
        assert any(r.startswith("numeric:mismatch") for r in zeros.reasons)
        assert good.passed, good.reasons
        assert any(d.rule == "reference:near-constant" for d in good.diagnostics)


class TestProfile:
    def test_simulator_stats_not_latency(self, relu_task: Task) -> None:
        """Profiling on the simulator reports counters and says it is not a latency."""
        result = SimBackend().profile(_src("relu_ok.py"), relu_task)
        assert not result.hardware and result.measured_on == MEASURED_ON
        assert result.kernel is None
        assert isinstance(result.sim_stats.get("dma_bytes"), int)
        assert result.sim_stats["dma_bytes"] > 0

    def test_estimate_is_the_profiles_model_without_a_numerics_run(self, relu_task: Task
                                                                   ) -> None:
        """The cost-only estimate gives the same modelled time as a full profile, and no
        simulator counters (the kernel did not run on numerics); static rules still come
        first."""
        full = SimBackend().profile(_src("relu_ok.py"), relu_task)
        cheap = SimBackend().estimate(_src("relu_ok.py"), relu_task)
        assert cheap.model["time_us"] == full.model["time_us"] > 0
        assert cheap.model["label"] == "model estimate (trn1), not a measurement"
        assert cheap.sim_stats == {} and full.sim_stats
        refused = SimBackend().estimate(_src("imports_torch.py"), relu_task)
        assert refused.model == {} and "import" in refused.log


RELU_SCALAR_BIAS = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def relu_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        tile = nl.load(x[i * 128:(i + 1) * 128, :])
        nisa.activation(dst=tile, op=nl.relu, data=tile, bias=0.0)
        nl.store(out[i * 128:(i + 1) * 128, :], value=tile)
    return out
'''


class TestPlatform:
    def test_generation_rules_reach_the_sandboxed_simulator(self, relu_task: Task,
                                                            relu_ref: ReferenceSet) -> None:
        """A scalar activation bias is refused for trn1 and verified for trn2 (ISA:1406)."""
        trn1 = SimBackend(platform="trn1").compile(RELU_SCALAR_BIAS, relu_task)
        assert not trn1.ok
        assert any(d.rule == "arch-unsupported" and "trn1" in d.message
                   for d in trn1.diagnostics), trn1.log
        assert checked(SimBackend(platform="trn2"), RELU_SCALAR_BIAS, relu_task, relu_ref).passed
