"""bf16 stays bf16: inputs read only by ops PyTorch rounds to bf16 load as bf16, no cast."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.lowering.lowering_support import (
    build_module,
    check_on_sim,
    lower_ok,
    make_inputs,
    make_task,
    module_source,
    simulate,
    to_numpy,
)

CHAINS = {
    "add": ("x + y", "x, y"),
    "chain": ("torch.relu(x * y - x) + 0.5 * y", "x, y"),
    "max": ("torch.maximum(x, -y).abs()", "x, y"),
}


def _run(task: Any) -> tuple[np.ndarray[Any, Any], torch.Tensor, str]:
    lowered = lower_ok(task)
    module = build_module(task)
    inputs = make_inputs(task, "normal")
    with torch.no_grad():
        want = module(*inputs)
    (got,) = simulate(lowered.source, lowered.function, [to_numpy(x) for x in inputs])
    return np.asarray(got), want, lowered.source


class TestBf16Native:
    @pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
    @pytest.mark.parametrize("name", sorted(CHAINS))
    def test_equals_eager_pytorch_exactly(self, name: str, dtype: str) -> None:
        """Each op rounds to the input dtype once, as eager PyTorch does: equal bit for bit,
        loaded in the input dtype and stored with no cast copy."""
        expr, args = CHAINS[name]
        got, want, source = _run(make_task(module_source(expr, args), [(130, 600)] * 2, dtype))
        nl_dtype = {"bfloat16": "nl.bfloat16", "float16": "nl.float16"}[dtype]
        assert source.count(f"dtype={nl_dtype})") >= 2 and "dtype=nl.float32)" not in source
        assert "nl.copy(" not in source
        assert str(got.dtype) == str(to_numpy(want).dtype)
        np.testing.assert_array_equal(got.astype(np.float32), want.float().numpy())

    def test_an_input_read_by_exp_still_loads_fp32(self) -> None:
        """exp is not in the native set: that input loads as fp32 (and matches)."""
        task = make_task(module_source("torch.exp(x) + y", "x, y"), [(64, 256)] * 2, "bfloat16")
        source = lower_ok(task).source
        x_load = next(line for line in source.splitlines() if "x_t = nl.load(" in line)
        assert "dtype=nl.float32" in x_load
        check_on_sim(task)

    def test_fp32_inputs_unchanged(self) -> None:
        source = lower_ok(make_task(module_source("x + y", "x, y"), [(64, 256)] * 2)).source
        assert source.count("dtype=nl.float32)") == 2


class TestParameterRowsBroadcastOnce:
    """An affine weight and bias are broadcast to 128 partitions once per kernel, not
    loaded and broadcast (a TensorE pass each) in every row tile."""

    @pytest.mark.parametrize(("expr", "init"), [
        ("self.ln(x)", "        self.ln = nn.LayerNorm(300)"),
        ("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w",
         "        self.w = nn.Parameter(torch.randn(300))"),
    ])
    def test_hoisted_and_matches_torch(self, expr: str, init: str) -> None:
        task = make_task(module_source(expr, init=init), [(260, 300)])
        source = lower_ok(task).source
        tile = source[source.index("def stage0_tile("):source.index("@nki.jit")]
        body = source[source.index("@nki.jit"):]
        assert "broadcast once" in body and "nl.broadcast_to(" not in tile
        assert "_v[0, 0:1, nl.ds(c0, q)]" not in tile  # no per-tile parameter load
        check_on_sim(task)
