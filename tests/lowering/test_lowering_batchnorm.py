"""Eval BatchNorm whatever its size: a long row runs in chunks, over 128 channels it is
elementwise ops; on the simulator against PyTorch."""

from __future__ import annotations

import pytest

from nkibot.task import Task
from tests.lowering.lowering_support import check_on_sim, lower_ok, make_task, module_source

STATS = ("        with torch.no_grad():\n"
         "            self.bn.running_mean.uniform_(-1, 1)\n"
         "            self.bn.running_var.uniform_(0.5, 2)\n")


def _task(bn: str, shape: tuple[int, ...]) -> Task:
    return make_task(module_source("self.bn(x)", init=f"        self.bn = {bn}\n" + STATS),
                     [shape])


class TestBatchNorm:
    @pytest.mark.parametrize(("bn", "shape"), [
        ("nn.BatchNorm2d(8)", (2, 8, 128, 128)),            # 16384 positions: 8 chunks
        ("nn.BatchNorm2d(4, affine=False)", (1, 4, 130, 100)),  # 13000: 6 and a ragged one
    ])
    def test_a_row_over_the_budget_runs_in_chunks(self, bn: str, shape: tuple[int, ...]) -> None:
        """A plane too long for one row tile is one group of chunked rows (it was split into
        elementwise ops by the front end, which asked the emitter's budget)."""
        task = _task(bn, shape)
        lowered = lower_ok(task)
        assert lowered.plan == [] and "nl.ds(h0, hsz)" in lowered.source
        check_on_sim(task)

    def test_a_short_row_is_loaded_whole(self) -> None:
        lowered = lower_ok(_task("nn.BatchNorm2d(8)", (2, 8, 16, 16)))
        assert "h0" not in lowered.source and "0:256]" in lowered.source

    def test_over_128_channels_is_elementwise(self) -> None:
        """The row emitter holds one channel a partition; 160 channels are written as
        elementwise ops by the scheduler's rewrite instead."""
        task = _task("nn.BatchNorm2d(160)", (2, 160, 6, 6))
        lowered = lower_ok(task)
        assert "batchnorm_rows" not in lowered.source
        check_on_sim(task)
