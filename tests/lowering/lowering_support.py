"""Shared helpers for the lowering tests: small modules, tasks, and a simulator run."""

from __future__ import annotations

import types
from typing import Any

import ml_dtypes
import numpy as np
import torch

from nkibot.lowering import Lowered, lower_task
from nkibot.task import Task

HEADER = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOLERANCE = {"float32": 1e-3, "bfloat16": 2e-2, "float16": 2e-2}
#: Three ops the lowering has no handler for, chained (so every one must be listed).
UNSUPPORTED_CHAIN = (
    "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.digamma(torch.lgamma(torch.erfinv(x)))\n"
)
UNSUPPORTED_OPS = ["aten.erfinv.default", "aten.lgamma.default", "aten.digamma.default"]


def module_source(expr: str, args: str = "x", init: str = "", params: str = "") -> str:
    """A `Model` whose forward returns `expr`; `init` adds constructor lines (8 spaces)."""
    body = init or "        pass"
    sig = f", {params}" if params else ""
    return (f"{HEADER}class Model(nn.Module):\n    def __init__(self{sig}):\n"
            f"        super().__init__()\n{body}\n\n    def forward(self, {args}):\n"
            f"        return {expr}\n")


def make_task(source: str, shapes: list[tuple[int, ...]], dtype: str = "float32",
              entry: str = "Model", init_args: list[Any] | None = None) -> Task:
    from nkibot.task import InputSpec

    return Task(reference_source=source, entry_point=entry, init_args=init_args or [],
                inputs=[InputSpec(name=f"in{i}", shape=s, dtype=dtype)  # type: ignore[arg-type]
                        for i, s in enumerate(shapes)])


def build_module(task: Task) -> torch.nn.Module:
    mod = types.ModuleType("lowering_test_reference")
    exec(compile(task.reference_source, "<reference>", "exec"), mod.__dict__)
    torch.manual_seed(1)
    module = getattr(mod, task.entry_point)(*task.init_args)
    assert isinstance(module, torch.nn.Module)
    return module.eval()  # as the harness runs references


def make_inputs(task: Task, domain: str, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in task.inputs:
        x = torch.randn(spec.shape, generator=gen)
        if domain == "positive":
            x = x.abs() + 0.1
        elif domain == "probability":
            x = torch.softmax(x, dim=-1)
        out.append(x.to(TORCH[spec.dtype]))
    return out


def to_numpy(t: torch.Tensor) -> np.ndarray[Any, Any]:
    if t.dtype == torch.int64:  # NKI has no int64 (BatchNorm's num_batches_tracked)
        return t.numpy().astype(np.int32)
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.detach().numpy().copy()


def simulate(source: str, function: str, arrays: list[np.ndarray[Any, Any]]) -> list[Any]:
    """Exec the generated module under the simulator and run its kernel once."""
    from nkibot.sim import activate

    with activate(target="trn1"):  # nkibot's reference generation
        import nki

        namespace: dict[str, Any] = {}
        exec(compile(source, "<lowered kernel>", "exec"), namespace)
        result = nki.simulate(namespace[function])(*arrays)
    return list(result) if isinstance(result, tuple) else [result]


def lower_ok(task: Task) -> Lowered:
    result = lower_task(task)
    assert isinstance(result, Lowered), result
    return result


def check_on_sim(task: Task, domain: str = "normal", tol: float | None = None) -> float:
    """Lower, run on the simulator, compare to PyTorch in fp32; returns the max abs error."""
    lowered = lower_ok(task)
    module = build_module(task)
    inputs = make_inputs(task, domain)
    with torch.no_grad():
        native = module(*inputs)
        expected = module(*[x.float() for x in inputs])
    natives = list(native) if isinstance(native, tuple) else [native]
    wanted = list(expected) if isinstance(expected, tuple) else [expected]
    arrays = [to_numpy(x) for x in inputs] + [to_numpy(v) for v in module.state_dict().values()]
    outputs = simulate(lowered.source, lowered.function, arrays)
    dtype = task.inputs[0].dtype
    limit = tol if tol is not None else TOLERANCE[dtype]
    worst = 0.0
    for got, ref, nat in zip(outputs, wanted, natives, strict=True):
        got_arr = np.asarray(got)
        assert got_arr.shape == tuple(ref.shape), (got_arr.shape, tuple(ref.shape))
        assert str(got_arr.dtype) == str(to_numpy(nat).dtype), (got_arr.dtype, nat.dtype)
        got32, ref32 = got_arr.astype(np.float32), ref.float().numpy()
        np.testing.assert_allclose(got32, ref32, atol=limit, rtol=limit)
        worst = max(worst, float(np.abs(got32 - ref32).max()))
    return worst
