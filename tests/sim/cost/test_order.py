"""The model is not sensitive to the order transfers were issued in (issue 30, defect 4).

A tiled bf16 add with an extra cast copy per tile was modelled faster than the same add
without it (2048 x 2048, 1024 columns a tile: 122.3 against 125.3 µs): each DMA took one
unbroken slot of the queues in program order, so transfers issued after a store left
idle gaps shorter than a transfer, and removing the copy moved the stores and so the gaps.
The queues now take a transfer's packets wherever they are idle from its ready time on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from nkibot.sim import activate
from nkibot.sim.cost import Knobs, estimate
from nkibot.sim.cost.timeline import Pool
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def k() -> Iterator[ModuleType]:
    with activate(force=True):
        yield load_module(HERE / "kernels.py", "cost_kernels_order")


#: As many buffers as fit SBUF (liveness.depths): the queues' order is what is tested.
UNBOUNDED = Knobs(loop_buffers=1 << 20)


@pytest.mark.parametrize("cols", [512, 1024])
def test_removing_a_copy_never_makes_a_dma_bound_add_slower(k: ModuleType, cols: int) -> None:
    shapes = (((2048, 2048), "bfloat16"), ((2048, 2048), "bfloat16"))
    copy = estimate(k.add_tiles, *shapes, cols=cols, cast_copy=True, knobs=UNBOUNDED)
    direct = estimate(k.add_tiles, *shapes, cols=cols, cast_copy=False, knobs=UNBOUNDED)
    assert direct.busy_ns["vector"] < copy.busy_ns["vector"]
    assert direct.busy_ns["dma"] == pytest.approx(copy.busy_ns["dma"])
    assert direct.makespan_ns <= copy.makespan_ns * 1.001


def test_a_transfer_takes_the_idle_time_in_pieces() -> None:
    pool = Pool(64)
    assert pool.fill(0.0, 2.0) == (0.0, 2.0)
    assert pool.fill(5.0, 2.0) == (5.0, 7.0)  # a later-ready transfer, placed first
    # 4 units ready at 0: 3 fit before the one at 5, the rest after it
    assert pool.fill(0.0, 4.0) == (2.0, 8.0)
    assert pool.busy == [(0.0, 2.0), (2.0, 5.0), (5.0, 7.0), (7.0, 8.0)]


def test_a_partition_broadcast_costs_one_matmul_whichever_the_spelling(k: ModuleType) -> None:
    """Issue 30, defect 3: `tile.broadcast_to` was free and `nl.broadcast_to` one matmul.
    ARCH1:201-203 says NKI runs the same matmul for the tile method."""
    x, row = ((128, 512), "float32"), ((1, 512), "float32")
    view = estimate(k.row_scale, x, row, spelling="view")
    spelled = estimate(k.row_scale, x, row, spelling="nl")
    plain = estimate(k.row_scale, x, ((128, 512), "float32"), spelling="none")
    assert view.instructions["tensor"] == spelled.instructions["tensor"] == 1  # once, not per read
    assert plain.instructions["tensor"] == 0
    mm = 4 * 512 / 2.8  # max(N, 64) cycles, fp32 4x, at the TensorE clock (ARCH1:267-269)
    assert view.busy_ns["tensor"] == pytest.approx(mm)
    assert spelled.busy_ns["tensor"] == pytest.approx(mm)
    assert view.makespan_ns == pytest.approx(spelled.makespan_ns, rel=0.02)
