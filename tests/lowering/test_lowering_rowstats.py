"""One-pass row statistics and single-pass squares in the row emitter, on the simulator:
a layer norm's mean and variance from bn_stats/bn_aggr, its normalisation as one Scalar
Engine pass, and x * x as one activation (square) with its row sum riding along."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import (
    check_on_sim,
    lower_ok,
    make_task,
    module_source,
)

LN = module_source("F.layer_norm(x, (x.shape[-1],), w, b)", args="x, w, b")
RMS = module_source("x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6) * w",
                    args="x, w")


def _body(source: str) -> str:
    return source[:source.index("@nki.jit")]


class TestLayerNormMoments:
    @pytest.mark.parametrize(("rows", "cols"), [(256, 512), (200, 700), (64, 1300)])
    def test_matches_torch(self, rows: int, cols: int) -> None:
        """Whole rows of 512, ragged 700 (512 + 188) and 1300 (three chunks): the
        bn_aggr mean and variance normalise as PyTorch does."""
        check_on_sim(make_task(LN, [(rows, cols), (cols,), (cols,)]), tol=2e-4)

    def test_bf16(self) -> None:
        """bf16 rows: statistics in fp32, within bf16 tolerance."""
        check_on_sim(make_task(LN, [(256, 384), (384,), (384,)], "bfloat16"))

    def test_one_statistics_pass_and_no_squares(self) -> None:
        """The tile gets bn_stats/bn_aggr, no square pass and no separate centred tile:
        the normalisation is one activation with scale rstd and bias -mean * rstd."""
        tile = _body(lower_ok(make_task(LN, [(256, 1024), (1024,), (1024,)])).source)
        assert "nisa.bn_stats(" in tile and "nisa.bn_aggr(" in tile
        assert "nl.square" not in tile and "nl.subtract" not in tile
        assert tile.count("nisa.activation(") == 1

    def test_centred_value_read_elsewhere(self) -> None:
        """When the centred rows are also an output, they are computed (and still right);
        the variance still comes from bn_aggr."""
        source = module_source("(x - x.mean(-1, keepdim=True), x.var(-1, unbiased=False))")
        lowered = lower_ok(make_task(source, [(128, 640)]))
        assert "nisa.bn_aggr(" in lowered.source
        check_on_sim(make_task(source, [(128, 640)]), tol=2e-4)

    def test_unbiased_variance_keeps_its_squares(self) -> None:
        """torch.var's default (N - 1) is not bn_aggr's variance: the squares stay."""
        source = module_source("x.var(-1)")
        lowered = lower_ok(make_task(source, [(128, 640)]))
        assert "bn_aggr" not in lowered.source
        check_on_sim(make_task(source, [(128, 640)]), tol=2e-4)


class TestSquares:
    def test_square_is_one_activation(self) -> None:
        """RMSNorm written out: x * x is activation(square) with the row sum in the same
        instruction, not a two-input multiply."""
        tile = _body(lower_ok(make_task(RMS, [(256, 1024), (1024,)])).source)
        assert "op=nl.square, data=" in tile and "reduce_res=" in tile
        assert "nl.multiply(x_t, x_t)" not in tile

    def test_rmsnorm_matches_torch(self) -> None:
        check_on_sim(make_task(RMS, [(200, 700), (700,)]), tol=2e-4)
