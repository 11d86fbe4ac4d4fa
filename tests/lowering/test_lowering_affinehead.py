"""A plain conv's eviction takes its tail's affine head (emit/conv/affinehead.py): adds,
subtracts, multiplies and divides by a literal or a per-channel parameter, as a (scale,
shift) table computed once."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import check_on_sim, lower_ok, make_task, module_source

PARAMS = ("\n        self.m = nn.Parameter(torch.rand(8, 1, 1) + 0.5)"
          "\n        self.b = nn.Parameter(torch.randn(8, 1, 1))")


@pytest.mark.parametrize(("init", "expr", "head"), [
    # level 2 54: a per-channel multiplier, then leaky ReLU and GELU
    ("nn.Conv2d(4, 8, 3)", "F.gelu(F.leaky_relu(self.conv(x) * self.m, 0.01))", "operator *"),
    # level 2 35: the subtract HardSwish reads twice, then a fused max pool and Mish
    ("nn.Conv2d(4, 8, 3)", "F.mish(F.max_pool2d(F.hardswish(self.conv(x) - 0.5), 2))",
     "operator -"),
    # a parameter add, a literal scale and a divide; no conv bias; the whole tail taken
    ("nn.Conv2d(4, 8, 3, bias=False)", "(self.conv(x) + self.b) * 3.0 / 4.0",
     "operator +, operator *, operator /"),
    # 1-D and 3-D, a literal on the left
    ("nn.Conv1d(4, 8, 3)", "torch.tanh(2.0 * self.conv(x))", "operator *"),
    ("nn.Conv3d(4, 8, 3)", "torch.sigmoid(self.conv(x) * self.m.unsqueeze(-1))", "operator *"),
])
def test_the_eviction_takes_the_affine_head(init: str, expr: str, head: str) -> None:
    shape = {"1d": (2, 4, 40), "2d": (2, 4, 14, 13), "3d": (1, 4, 6, 7, 8)}[init[7:9]]
    task = make_task(module_source(expr, init=f"        self.conv = {init}" + PARAMS), [shape])
    lowered = lower_ok(task)
    assert lowered.plan == [], lowered.plan
    assert f"{head} folded into self.conv's PSUM eviction" in lowered.source, lowered.source
    assert "scale=b_sb[0:csz, 0, 0:1], bias=b_sb[0:csz, 0, 1:2]" in lowered.source
    check_on_sim(task)


def test_a_head_the_tail_reads_behind_is_kept() -> None:
    """The product reads the conv's own output: the eviction keeps to the bias."""
    task = make_task(module_source("(lambda y: (y - 0.5) * y)(self.conv(x))",
                                   init="        self.conv = nn.Conv2d(4, 8, 3)"),
                     [(2, 4, 14, 13)])
    source = lower_ok(task).source
    assert "folded into self.conv's PSUM eviction" not in source
    check_on_sim(task)


def test_a_per_position_tensor_is_no_head() -> None:
    """An add of a tensor that varies along the positions is the tail's, not a column's."""
    task = make_task(module_source("self.conv(x) + y", args="x, y",
                                   init="        self.conv = nn.Conv2d(4, 8, 3)"),
                     [(2, 4, 14, 13), (1, 1, 12, 11)])
    source = lower_ok(task).source
    assert "folded into self.conv's PSUM eviction" not in source
    check_on_sim(task)


def test_the_head_in_the_tail_is_a_variant() -> None:
    """The optimize phase times both: level 2 32's channel fold was modelled slower with the
    head on the eviction (2,720 -> 3,066 us) though it does a Scalar pass a tile fewer."""
    task = make_task(module_source("torch.min(self.conv(x) * 2.0, dim=1, keepdim=True)[0]",
                                   init="        self.conv = nn.Conv2d(4, 8, 3)"),
                     [(2, 4, 14, 13)])
    lowered = lower_ok(task)
    assert "def fold_affine(" in lowered.source
    variant = next(v for v in lowered.variants if v.name == "conv eviction head tiling tail")
    assert "def fold_affine(" not in variant.source and "scale=2.0" in variant.source
    check_on_sim(task)
