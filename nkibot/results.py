"""Result records shared by the backends, the agent loop, the renderers and the CLI.

Every figure carries where it was measured: `hardware=True` means a Trn1 NeuronCore;
otherwise it came from a simulator (`simulator` names which one) and is not a latency.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: How every generated kernel takes its arguments (recorded in each result).
CALLING_CONVENTION = (
    "kernel(*forward_inputs, *state_dict_tensors) -> output | tuple[outputs]: "
    "forward's tensor inputs in order, then parameters and buffers in state_dict() order; "
    "int64 tensors arrive as int32 (NKI has no 64-bit integers)"
)


Status = Literal["verified", "compiled", "failed", "declined", "cancelled"]


class Diagnostic(BaseModel):
    """One compiler/simulator message, located in the kernel source."""

    rule: str
    message: str
    file: str | None = None
    line: int | None = None
    severity: Literal["error", "warning", "notice"] = "error"
    fix: str | None = None


class CompileResult(BaseModel):
    ok: bool
    log: str = ""
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    seconds: float = 0.0
    backend: str = "sim"
    #: "nkibot-sim", "nki.simulate" (official), or "neuronx-cc <version>".
    compiler: str = ""


class WorstElement(BaseModel):
    index: list[int]
    expected: float
    actual: float
    abs_error: float


class TrialStats(BaseModel):
    """Error statistics of one output of one trial."""

    trial: int
    seed: int | None
    label: str = ""  # e.g. "normal", "large magnitude", "reference fp32"
    output: int = 0
    passed: bool
    shape_ok: bool = True
    dtype_ok: bool = True
    expected_shape: list[int] = Field(default_factory=list)
    actual_shape: list[int] = Field(default_factory=list)
    expected_dtype: str = ""
    actual_dtype: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mean_abs_error: float = 0.0
    mismatched: int = 0
    total: int = 0
    nan_count: int = 0
    inf_count: int = 0
    atol: float = 0.0
    rtol: float = 0.0
    worst: list[WorstElement] = Field(default_factory=list)
    #: compared within twice the reference's own fp32 error, wider than the tolerance
    #: (a stress trial whose output cancels to near zero; see `verify.stats`)
    ill_conditioned: bool = False
    #: mean signed error over the compared elements (a systematic bias shows here)
    bias: float = 0.0
    #: the most mean abs error the output's scale allows (None: not checked, see
    #: `verify.stats.aggregate_limit`); `aggregate_ok` says whether it held
    aggregate_limit: float | None = None
    aggregate_ok: bool = True
    #: elements left out because the reference is NaN there on a special-values trial:
    #: that input is outside the operator's domain
    out_of_domain: int = 0


def worst_error(trials: list[TrialStats]) -> str:
    """The largest absolute error and where it was: its trial, inputs and relative error.

    A stress trial's absolute error is large by design (bf16 steps are 0.5 at x + 100), so
    the number alone alarms; its trial and relative error say whether it should.
    """
    if not trials:
        return ""
    t = max(trials, key=lambda x: x.max_abs_error)
    where = f"trial {t.trial}" + (f", {t.label}" if t.label else "")
    return f"max abs error {t.max_abs_error:.3g} ({where}; max rel {t.max_rel_error:.3g})"


class VerifyResult(BaseModel):
    passed: bool
    trials: list[TrialStats] = Field(default_factory=list)
    #: Named guard failures, e.g. "static:imports-torch", "guard:inputs-modified".
    reasons: list[str] = Field(default_factory=list)
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    log: str = ""
    seconds: float = 0.0
    isolation: list[str] = Field(default_factory=list)  # e.g. ["env", "rlimits", "netns"]


class Latency(BaseModel):
    p50_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float
    iterations: int


class ProfileResult(BaseModel):
    hardware: bool
    #: Where figures come from: "Trn1 hardware" or "simulator: not a latency measurement".
    measured_on: str
    kernel: Latency | None = None
    torch_device: Latency | None = None  # PyTorch via torch-neuronx on the same device
    torch_cpu: Latency | None = None
    speedup_vs_device: float | None = None
    speedup_vs_cpu: float | None = None
    #: NeuronCore execution time alone (device tracing, no host transfer), when the SDK
    #: offers it; `kernel` and the baselines are host wall clock per call, like for like.
    kernel_device_time: Latency | None = None
    #: Simulator instruction counts / DMA bytes, when the simulator ran it.
    sim_stats: dict[str, object] = Field(default_factory=dict)
    #: The cost model's figures (`nkibot.sim.cost.CostReport.as_dict()`), each under its
    #: "label": "model estimate (<target>), not a measurement". On hardware they stand
    #: beside the measured p50/p99 (`model_ratio`), a calibration record of the model.
    model: dict[str, object] = Field(default_factory=dict)
    log: str = ""

    @property
    def model_ratio(self) -> float | None:
        """Modelled / measured device time (p50), when both exist."""
        us = self.model.get("time_us")
        lat = self.kernel_device_time or self.kernel
        if not isinstance(us, int | float) or lat is None or not lat.p50_us:
            return None
        return float(us) / lat.p50_us


class TokenUsage(BaseModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
        )


class ToolCallRecord(BaseModel):
    name: str
    arguments: dict[str, object] = Field(default_factory=dict)
    result_summary: str = ""
    ok: bool = False


class TurnRecord(BaseModel):
    turn: int
    model: str
    text: str = ""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    compiled: bool | None = None
    verified: bool | None = None
    max_abs_error: float | None = None
    #: `worst_error` of the turn's last verification: the trial and relative error too.
    worst: str | None = None
    error: str | None = None
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    seconds: float = 0.0


class KernelArg(BaseModel):
    """One kernel argument in calling-convention order, and where its value comes from."""

    name: str
    source: Literal["input", "state_dict"]
    index: int | None = None  # for source == "input"
    key: str | None = None  # for source == "state_dict"
    shape: list[int] = Field(default_factory=list)
    dtype: str = "float32"


class KernelInfo(BaseModel):
    path: str
    function: str
    args: list[KernelArg] = Field(default_factory=list)
    calling_convention: str = CALLING_CONVENTION
    source: str = ""


class OptimizeStep(BaseModel):
    """One candidate of the optimize phase: its time, whether it was verified and kept."""

    turn: int
    time_us: float | None = None
    #: Where `time_us` comes from: "model estimate (trn1), not a measurement" or the
    #: hardware the p50 was measured on.
    source: str = ""
    #: The change, as the model named it (first line of its reply).
    change: str = ""
    #: True: verified; False: failed verification (or sent no kernel); None: not verified
    #: because the cost model ranked it no faster (`reason` says so, `time_us` is modelled).
    verified: bool | None = None
    kept: bool = False
    #: Why a candidate was not kept ("did not verify", "not faster: ...",
    #: "not verified: modelled slower (12,112 µs against 4,660 µs)"), or, for a kept one,
    #: what the model saw change ("faster: spill bytes ... -> ...; ...").
    reason: str = ""


class RequirementsCheck(BaseModel):
    """The repo's performance requirement against a verified kernel (see handlers)."""

    requirement: str  # e.g. "min_roofline_fraction 0.5"
    met: bool
    actual: float | None = None
    wanted: float
    detail: str = ""


class ConversionResult(BaseModel):
    """What `nkibot convert` prints with --json, and what the renderers draw from."""

    status: Status
    target: str
    backend: str
    hardware: bool
    #: The Trainium generation the kernel was checked for: trn1, trn2 or trn3 (`target:`
    #: in the repo config; `target` above is what was converted, `path.py::Name`).
    platform: Literal["trn1", "trn2", "trn3"] = "trn1"
    simulator: str | None = None
    model: str
    turns: int = 0
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    seconds: float = 0.0
    kernel: KernelInfo | None = None
    compile: CompileResult | None = None
    verify: VerifyResult | None = None
    profile: ProfileResult | None = None
    transcript: list[TurnRecord] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    #: The optimize phase after the first verified kernel (empty when it did not run).
    optimize_chain: list[OptimizeStep] = Field(default_factory=list)
    #: The repo's performance requirement, when it sets one and a kernel verified.
    requirements: RequirementsCheck | None = None
    calling_convention: str = CALLING_CONVENTION
