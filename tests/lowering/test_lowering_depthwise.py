"""Depthwise convs with their taps split between diagonal PE matmuls and the Vector Engine."""

from __future__ import annotations

import pytest

from nkibot.lowering.emit.conv.depthwise import _pe_taps
from tests.lowering.lowering_support import check_on_sim, make_task, module_source

#: name -> (constructor, input shape): aligned (128 rows) and ragged row tiles
DEPTHWISE = {
    "asymmetric_3x7_aligned": ("nn.Conv2d(64, 64, (3, 7), groups=64)", (2, 64, 12, 20)),
    "one_tap_ragged": ("nn.Conv2d(5, 5, 1, groups=5)", (7, 5, 6, 9)),
    "two_taps_bias_ragged": ("nn.Conv1d(12, 12, 2, groups=12)", (11, 12, 40)),
    "multiplier_aligned": ("nn.Conv2d(32, 128, 3, padding=1, groups=32)", (2, 32, 9, 70)),
}


def _task(name: str, dtype: str):  # type: ignore[no-untyped-def]
    ctor, shape = DEPTHWISE[name]
    # bf16 activations meet the module's fp32 weights through an explicit upcast
    expr = "self.conv(x)" if dtype == "float32" else "self.conv(x.float())"
    return make_task(module_source(expr, init=f"        self.conv = {ctor}"), [shape], dtype)


class TestDepthwiseSplitOnSim:
    """PSUM's diagonal taps plus the Vector Engine's taps match PyTorch."""

    @pytest.mark.parametrize("name", sorted(DEPTHWISE))
    def test_fp32_matches_torch(self, name: str) -> None:
        """fp32 depthwise convs match within 1e-3, one tap to 21, m = 1 and 4."""
        check_on_sim(_task(name, "float32"))

    @pytest.mark.parametrize("name", ["asymmetric_3x7_aligned", "two_taps_bias_ragged"])
    def test_bf16_matches_torch(self, name: str) -> None:
        """bf16 planes are computed in fp32 and stored as bf16."""
        check_on_sim(_task(name, "bfloat16"))

    def test_tap_shares(self) -> None:
        """About 55 % of the taps on the PE from 4 taps up, one at least left to the Vector."""
        assert [_pe_taps(t) for t in (1, 3, 4, 9, 21)] == [0, 0, 2, 5, 12]
