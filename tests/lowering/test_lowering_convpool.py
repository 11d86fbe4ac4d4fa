"""A reduction after a convolution, fused into its tiles, so the conv's output never reaches
HBM. A global pool (sum, mean, max or min over every position dim): each output tile folds
its evicted (and tailed) values into one column of partials per channel, and the batch
element's partials fold once more (KernelBench level 2 67, 42). A fold over the channels
(min over dim 1: level 2 25, 32): each tile's channels, the partitions, are folded 128
positions at a time through Tensor Engine transposes. A max or average pool whose windows
tile the positions (level 2 35, 46, 65, 82): the grid runs over pooled positions, each conv
tile covers whole windows and is pooled before its store. On the simulator against
PyTorch."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import (
    check_on_sim,
    lower_ok,
    make_task,
    module_source,
)

CONV = "        self.conv = nn.Conv2d(4, 8, 3)"
BIAS = "\n        self.bias = nn.Parameter(torch.randn(6, 1, 1))"


def _unstaged(source: str) -> bool:
    """No HBM scratch but an eviction's (scale, shift) table (affinehead.py)."""
    return all("evict_hbm" in line for line in source.splitlines() if "buffer=nl.hbm" in line)


def _fused(source: str) -> bool:
    return "nisa.tensor_reduce(dst=part[0:csz, nl.ds(t, 1)]" in source and _unstaged(source)


@pytest.mark.parametrize(("init", "expr", "shape"), [
    # level 2 67 written two ways: mean with keepdim, adaptive_avg_pool2d then squeezes
    (CONV, "torch.mean(F.gelu(self.conv(x)), dim=(2, 3), keepdim=True)", (2, 4, 10, 9)),
    (CONV, "F.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).squeeze(-1).squeeze(-1)",
     (2, 4, 10, 9)),
    # dims dropped, negative dims, min
    (CONV, "torch.mean(torch.relu(self.conv(x)), dim=(2, 3))", (2, 4, 10, 9)),
    (CONV, "torch.amin(self.conv(x), dim=(-1, -2), keepdim=True)", (2, 4, 10, 9)),
    # max, then a per-channel parameter and tanh on the pooled values (the helper after it)
    ("        self.conv = nn.Conv2d(3, 6, 3, padding=1)" + BIAS,
     "torch.tanh(torch.amax(self.conv(x) * 2.0, dim=(2, 3), keepdim=True) + self.bias)",
     (2, 3, 7, 8)),
    # a transposed conv over its zero-inserted plane (level 2 42's head)
    ("        self.conv = nn.ConvTranspose2d(4, 6, 3, stride=1, padding=1)" + BIAS,
     "torch.mean(self.conv(x), dim=(2, 3), keepdim=True) + self.bias", (2, 4, 9, 7)),
    # 3-D, with groups
    ("        self.conv = nn.Conv3d(4, 6, 3, groups=2)",
     "torch.mean(torch.relu(self.conv(x)), dim=(2, 3, 4), keepdim=True)", (1, 4, 6, 7, 5)),
])
def test_global_pool_fused_and_verified(init: str, expr: str, shape: tuple[int, ...]) -> None:
    task = make_task(module_source(expr, init=init), [shape])
    lowered = lower_ok(task)
    assert lowered.plan == [], lowered.plan
    assert _fused(lowered.source)
    check_on_sim(task)


def test_banded_plane_numbers_its_tiles_across_bands() -> None:
    """A plane over the SBUF budget loads in bands: each band writes its partials from the
    column after the previous band's (t0), so every tile has a column of its own."""
    task = make_task(module_source("torch.mean(torch.sigmoid(self.conv(x)), dim=(2, 3), "
                                   "keepdim=True)", init=CONV), [(1, 4, 200, 200)])
    lowered = lower_ok(task)
    assert lowered.plan == [] and "def conv_band(" in lowered.source
    assert "t0 + s0" in lowered.source and _fused(lowered.source)
    check_on_sim(task)


@pytest.mark.parametrize(("expr", "cast"), [
    ("torch.mean(self.conv(x.float()), dim=(2, 3)).to(x.dtype)", "out_cast = nl.copy("),
    ("torch.amax(self.conv(x.float()), dim=(2, 3), keepdim=True).to(x.dtype)",
     "fin = nl.copy(tot, dtype=nl.bfloat16)"),
])
def test_bf16_output_is_cast_after_the_fold(expr: str, cast: str) -> None:
    """By the helper after the pool when ops follow it, else on the folded tile."""
    task = make_task(module_source(expr, init=CONV), [(2, 4, 8, 8)], "bfloat16")
    lowered = lower_ok(task)
    assert _fused(lowered.source) and cast in lowered.source
    check_on_sim(task)


def test_a_pool_is_a_variant_the_optimize_phase_can_stage() -> None:
    lowered = lower_ok(make_task(module_source("torch.mean(self.conv(x), dim=(2, 3))",
                                               init=CONV), [(2, 4, 8, 8)]))
    staged = [v for v in lowered.variants if v.name == "conv tail tiling staged"]
    assert len(staged) == 1 and "part[0:csz, nl.ds(t, 1)]" not in staged[0].source


@pytest.mark.parametrize(("init", "expr", "shape", "why"), [
    # the pool reads only part of the positions: a row reduction, not a global pool
    (CONV, "torch.mean(self.conv(x), dim=3, keepdim=True)", (2, 4, 8, 8), "partial"),
    # the conv's value is read after the pool too (a residual of the pooled mean)
    (CONV, "(lambda y: y - y.mean(dim=(2, 3), keepdim=True))(self.conv(x))", (2, 4, 8, 8),
     "read after"),
    # a strided transposed conv runs phase by phase: its pool is a stage
    ("        self.conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)",
     "torch.mean(self.conv(x), dim=(2, 3), keepdim=True)", (2, 4, 6, 7), "phase"),
])
def test_what_is_not_fused_still_verifies(init: str, expr: str, shape: tuple[int, ...],
                                          why: str) -> None:
    task = make_task(module_source(expr, init=init), [shape])
    lowered = lower_ok(task)
    assert not _fused(lowered.source), why
    check_on_sim(task)



@pytest.mark.parametrize(("init", "expr", "shapes"), [
    # level 2 32: scale, then the min over the channels (values only)
    ("        self.conv = nn.Conv2d(3, 8, 3)",
     "torch.min(self.conv(x) * 2.0, dim=1, keepdim=True)[0]", [(2, 3, 8, 8)]),
    # level 2 25: tanh twice after it; tiles of more than 128 positions (two transposes)
    ("        self.conv = nn.Conv2d(3, 16, 3)",
     "torch.tanh(torch.tanh(torch.min(self.conv(x), dim=1, keepdim=True)[0]))",
     [(2, 3, 30, 31)]),
    # a sum, dim dropped
    ("        self.conv = nn.Conv2d(3, 16, 3)", "torch.sum(torch.relu(self.conv(x)), dim=1)",
     [(2, 3, 12, 9)]),
    # 3-D, a max, then a tensor of the result's shape (loaded at the tile's positions)
    ("        self.conv = nn.Conv3d(3, 16, 3)",
     "torch.amax(self.conv(x), dim=1, keepdim=True) * y", [(1, 3, 6, 7, 8), (1, 1, 4, 5, 6)]),
])
def test_channel_fold_fused_and_verified(init: str, expr: str,
                                         shapes: list[tuple[int, ...]]) -> None:
    args = "x, y" if len(shapes) == 2 else "x"
    task = make_task(module_source(expr, args=args, init=init), shapes)
    lowered = lower_ok(task)
    assert lowered.plan == [], lowered.plan
    assert "nisa.nc_transpose(row_ps[0:1, nl.ds(cb * 128, w)], col)" in lowered.source
    assert _unstaged(lowered.source)
    check_on_sim(task)


@pytest.mark.parametrize(("init", "expr"), [
    # logsumexp over the channels is several ops (max, exp, sum, log): a stage
    ("        self.conv = nn.Conv2d(3, 16, 3, padding=1)",
     "torch.logsumexp(self.conv(x), dim=1, keepdim=True)"),
    # groups: a group's channels are not all the channels
    ("        self.conv = nn.Conv2d(4, 8, 3, groups=2)",
     "torch.amin(self.conv(x), dim=1, keepdim=True)"),
])
def test_channel_folds_not_fused_still_verify(init: str, expr: str) -> None:
    task = make_task(module_source(expr, init=init), [(2, 4 if "groups" in init else 3, 9, 8)])
    lowered = lower_ok(task)
    assert "row_ps" not in lowered.source and len(lowered.plan) >= 2, lowered.plan
    check_on_sim(task)


POOL2 = "\n        self.pool = nn.{}({})"


@pytest.mark.parametrize(("init", "expr", "shape"), [
    # level 2 35: subtract, HardSwish, max pool 2, Mish after it
    (CONV + POOL2.format("MaxPool2d", 2), "F.mish(self.pool(F.hardswish(self.conv(x) - 0.5)))",
     (2, 4, 14, 15)),
    # level 2 46: average pool 2 over rows of 29 (the last row and column dropped)
    (CONV + POOL2.format("AvgPool2d", 2), "self.pool(torch.tanh(self.conv(x) - 0.5) - 0.2)",
     (2, 4, 30, 31)),
    # level 2 82: max pool 4, a per-channel parameter before it; rows over a tile
    (CONV + POOL2.format("MaxPool2d", 4) + "\n        self.bias = nn.Parameter(torch.randn(8, "
     "1, 1))", "self.pool(torch.tanh(self.conv(x)) * 2.0 + self.bias)", (2, 4, 40, 70)),
    # 3-D max pool 2 (level 2 43's head)
    ("        self.conv = nn.Conv3d(3, 8, 3)" + POOL2.format("MaxPool3d", 2),
     "self.pool(torch.relu(self.conv(x)))", (1, 3, 8, 9, 10)),
    # a plane in bands: bands of whole windows (level 2 65: average pool 4, then sigmoid)
    (CONV + POOL2.format("AvgPool2d", 4), "torch.sigmoid(self.pool(self.conv(x)))",
     (1, 4, 200, 203)),
    (CONV + POOL2.format("MaxPool2d", 2), "torch.clamp(self.pool(self.conv(x)), -0.5, 0.5)",
     (1, 4, 201, 200)),
])
def test_window_pool_fused_and_verified(init: str, expr: str, shape: tuple[int, ...]) -> None:
    """The other dims' window offsets fold with no copy: the first two in one instruction
    (level 2 35: 0.354 -> 0.389 of the roofline, model estimate trn1)."""
    task = make_task(module_source(expr, init=init), [shape])
    lowered = lower_ok(task)
    assert lowered.plan == [], lowered.plan
    assert "pool of" in lowered.source and _unstaged(lowered.source)
    assert "nisa.tensor_copy(dst=pv" not in lowered.source, lowered.source
    if shape[-1] > 150:
        assert "def conv_band(" in lowered.source
    check_on_sim(task)


def test_a_reduction_after_the_pool_is_a_stage_of_its_own() -> None:
    """level 2 65: the sum after the pool joins no group with it (a stage reads the pooled,
    small tensor)."""
    task = make_task(module_source("torch.sum(torch.sigmoid(self.pool(self.conv(x))), "
                                   "dim=(1, 2, 3))", init=CONV + POOL2.format("AvgPool2d", 4)),
                     [(2, 4, 22, 22)])
    lowered = lower_ok(task)
    assert len(lowered.plan) == 2 and "pool of" in lowered.source, lowered.plan
    check_on_sim(task)


@pytest.mark.parametrize(("pool", "shape"), [
    ("nn.MaxPool2d(3, stride=2)", (2, 4, 12, 12)),  # overlapping windows
    ("nn.MaxPool2d(2, padding=1)", (2, 4, 12, 12)),  # padding
    ("nn.MaxPool2d(2, ceil_mode=True)", (2, 4, 11, 11)),  # a partial last window
])
def test_other_pools_stay_stages(pool: str, shape: tuple[int, ...]) -> None:
    task = make_task(module_source("self.pool(torch.relu(self.conv(x)))",
                                   init=CONV + f"\n        self.pool = {pool}"), [shape])
    lowered = lower_ok(task)
    assert "pool of" not in lowered.source and len(lowered.plan) == 2, lowered.plan
    check_on_sim(task)


def test_a_grouped_conv_of_few_channels_a_group_keeps_its_tail_a_stage() -> None:
    """Tiles of one channel would carry the tail's per-tile loads and instructions for one
    partition's work (level 3 22's depthwise-as-groups convs: 302 ms modelled fused, 13.6
    staged): the tail is a stage of its own."""
    init = ("        self.conv = nn.Conv2d(8, 4, 3, stride=2, groups=4)\n"
            "        self.bias = nn.Parameter(torch.randn(4, 1, 1))")
    task = make_task(module_source("torch.clamp(self.conv(x) * 0.5 + self.bias, 0.0, 6.0)",
                                   init=init), [(2, 8, 11, 12)])
    lowered = lower_ok(task)
    assert "def conv_tail(" not in lowered.source and len(lowered.plan) == 2, lowered.plan
    check_on_sim(task)
