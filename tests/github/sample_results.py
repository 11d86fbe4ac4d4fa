"""Deterministic ConversionResults for renderer and publisher tests (no pipeline run)."""

from __future__ import annotations

from nkibot.results import (
    CompileResult,
    ConversionResult,
    Diagnostic,
    KernelArg,
    KernelInfo,
    Latency,
    ProfileResult,
    TokenUsage,
    ToolCallRecord,
    TrialStats,
    TurnRecord,
    VerifyResult,
)

KERNEL_SOURCE = '''import nki
import nki.language as nl


@nki.jit
def rmsnorm_kernel(x, weight):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    return out
'''


def trials(n: int = 2, passed: bool = True) -> list[TrialStats]:
    return [TrialStats(trial=i, seed=i, label="normal", passed=passed, max_abs_error=1e-6 * (i + 1),
                       max_rel_error=2e-6, mean_abs_error=1e-8, mismatched=0 if passed else 7,
                       total=1024, atol=1e-3, rtol=1e-3, expected_shape=[4, 256],
                       actual_shape=[4, 256], expected_dtype="float32", actual_dtype="float32")
            for i in range(n)]


def turns() -> list[TurnRecord]:
    return [
        TurnRecord(turn=1, model="claude", text="First try.", compiled=False,
                   error="[partition-dim] tile has 256 partitions (at kernel.py:6)",
                   tokens=TokenUsage(input=1200, output=300), seconds=2.5,
                   tool_calls=[ToolCallRecord(name="compile_kernel", ok=False,
                                              result_summary="compile failed: partition-dim")]),
        TurnRecord(turn=2, model="claude", text="Tiled by 128.", compiled=True, verified=True,
                   max_abs_error=2e-6, tokens=TokenUsage(input=1500, output=400), seconds=3.0,
                   tool_calls=[ToolCallRecord(name="verify_kernel", ok=True,
                                              result_summary="verify: PASSED 2 trials")]),
    ]


def kernel() -> KernelInfo:
    return KernelInfo(path="nki_kernels/norm_rms_norm_nki.py", function="rmsnorm_kernel",
                      source=KERNEL_SOURCE, args=[
                          KernelArg(name="x", source="input", index=0, shape=[4, 256]),
                          KernelArg(name="weight", source="state_dict", key="weight",
                                    shape=[256])])


def simulated() -> ConversionResult:
    return ConversionResult(
        status="verified", target="src/norm.py::RMSNorm", backend="sim", hardware=False,
        simulator="nkibot-sim", model="claude", turns=2,
        tokens=TokenUsage(input=2700, output=700, cache_read=100), seconds=12.25,
        kernel=kernel(), compile=CompileResult(ok=True, log="compiled ok\n", compiler="nkibot-sim"),
        verify=VerifyResult(passed=True, trials=trials()),
        profile=ProfileResult(hardware=False, measured_on="simulator: not a latency measurement",
                              sim_stats={"dma_bytes": 4096}),
        transcript=turns())


def hardware() -> ConversionResult:
    lat = Latency(p50_us=120.0, p99_us=150.0, mean_us=125.0, min_us=110.0, max_us=160.0,
                  iterations=100)
    fast = Latency(p50_us=40.0, p99_us=55.0, mean_us=42.0, min_us=38.0, max_us=60.0,
                   iterations=100)
    base = simulated()
    return base.model_copy(update={
        "backend": "neuron", "hardware": True, "simulator": None,
        "profile": ProfileResult(hardware=True, measured_on="Trn1 hardware", kernel=fast,
                                 torch_device=lat, speedup_vs_device=3.0)})


def compile_failed(n_diagnostics: int = 3) -> ConversionResult:
    diags = [Diagnostic(rule="partition-dim", message=f"problem {i}", line=i + 1,
                        fix="tile by 128") for i in range(n_diagnostics)]
    return ConversionResult(
        status="failed", target="src/norm.py::RMSNorm", backend="sim", hardware=False,
        simulator="nkibot-sim", model="claude", turns=1, seconds=3.0, kernel=kernel(),
        compile=CompileResult(ok=False, log="error: partition-dim\n" * 5, diagnostics=diags),
        transcript=turns()[:1], reasons=["no kernel compiled within 1 turn"])
