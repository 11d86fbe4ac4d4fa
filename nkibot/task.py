"""The conversion task: what to convert, at which shapes, checked how strictly.

A Task is plain data (JSON round-trips through the sandboxed harness). Loading it
from a KernelBench-style file or an explicit spec lives in `nkibot.convert.taskload`.

Kernel calling convention (fixed; recorded in every result): the generated
`@nki.jit` function takes the forward's tensor inputs in order, then the module's
parameters and buffers in `state_dict()` order, as arrays, and returns the output(s).
int64 tensors (class indices, BatchNorm's `num_batches_tracked`) arrive as int32: NKI
has no 64-bit integers.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nkibot.results import KernelArg

Dtype = Literal[
    "float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2",
    "int8", "int16", "int32", "int64", "uint8", "bool",
]
FLOAT_DTYPES: frozenset[str] = frozenset(
    {"float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2"}
)



class InputSpec(BaseModel):
    """One tensor input of the forward (or a non-tensor scalar kept as a constant)."""

    model_config = ConfigDict(frozen=True)

    name: str
    shape: tuple[int, ...]
    dtype: Dtype = "float32"


class Tolerance(BaseModel):
    model_config = ConfigDict(frozen=True)

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


def default_tolerances() -> dict[str, Tolerance]:
    low = Tolerance(atol=2e-2, rtol=2e-2)
    return {
        "float32": Tolerance(atol=1e-3, rtol=1e-3),
        "bfloat16": low,
        "float16": low,
        "float8_e4m3": Tolerance(atol=1.25e-1, rtol=1.25e-1),
        "float8_e5m2": Tolerance(atol=2.5e-1, rtol=2.5e-1),
    }


class SourceKernel(BaseModel):
    """The hand-written kernel a conversion replaces (CUDA, or Triton with a reference).

    The PyTorch reference defines what must be computed; this source goes into the
    model's prompt for its algorithm and tiling, never into the harness.
    """

    model_config = ConfigDict(frozen=True)

    language: Literal["cuda", "triton"]
    path: str
    name: str
    source: str


class Task(BaseModel):
    """Everything the loop, the harness and the backends need to know about one target."""

    reference_source: str
    entry_point: str
    source_path: str = "<memory>"
    kind: Literal["module", "function", "triton"] = "module"
    init_args: list[object] = Field(default_factory=list)
    init_kwargs: dict[str, object] = Field(default_factory=dict)
    inputs: list[InputSpec] = Field(default_factory=list)
    # True when the reference file defines get_inputs(): trials then draw inputs from it.
    has_get_inputs: bool = False
    tolerances: dict[str, Tolerance] = Field(default_factory=default_tolerances)
    dialect: Literal["nki"] = "nki"
    max_turns: int = Field(default=10, ge=1)
    compile_timeout_s: float = Field(default=120.0, gt=0)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    #: Parameters and buffers in state_dict() order (name = key): the kernel's trailing args.
    state_dict: list[InputSpec] = Field(default_factory=list)
    #: Absolute path of the reference file on disk, when loaded from one (sibling imports).
    reference_file: str | None = None
    #: The CUDA or Triton kernel being migrated, when the target is one (prompt only).
    migrate_from: SourceKernel | None = None

    def tolerance_for(self, dtype: str) -> Tolerance:
        return self.tolerances.get(dtype) or self.tolerances.get("float32") or Tolerance(
            atol=1e-3, rtol=1e-3
        )

    @property
    def ranks(self) -> list[int]:
        return [len(spec.shape) for spec in self.inputs]


def _identifier(key: str) -> str:
    text = re.sub(r"\W", "_", key)
    return text if text and not text[0].isdigit() else f"p_{text}"


def describe_kernel_args(task: Task) -> list[KernelArg]:
    """Kernel arguments in calling-convention order: forward inputs, then state_dict."""
    args = [KernelArg(name=s.name, source="input", index=i, shape=list(s.shape), dtype=s.dtype)
            for i, s in enumerate(task.inputs)]
    taken = {a.name for a in args}
    for spec in task.state_dict:
        name = _identifier(spec.name)
        while name in taken:
            name = f"{name}_"
        taken.add(name)
        args.append(KernelArg(name=name, source="state_dict", key=spec.name,
                              shape=list(spec.shape), dtype=spec.dtype))
    return args
