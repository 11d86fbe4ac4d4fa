"""Stores into interleaved slices of one output do not wait for each other.

A conv tile stores [channels, rows, width] into a channel-major output: the byte range of
one tile's rows overlaps the next tile's in every channel, but no element is shared. The
recorder compared byte ranges only, so each store waited for the previous one, fixed DMA
latency included (level 2 57, Conv2d 8 -> 64 on 128 x 128: 1024 stores in series, 1887.7
us modelled; 1667.1 us now, model estimate trn1). Views of one pattern (the same strides
and extents) are now compared element by element (`schedule._disjoint`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from nkibot.sim import activate
from nkibot.sim.cost import estimate
from nkibot.sim.cost.schedule import _disjoint, _Tile
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent
X = ((64, 4, 126), "float32")


@pytest.fixture(scope="module")
def k() -> Iterator[ModuleType]:
    with activate(force=True):
        yield load_module(HERE / "kernels.py", "cost_kernels_interleaved")


def test_interleaved_stores_overlap_in_time(k: ModuleType) -> None:
    apart = estimate(k.interleaved_stores, X)
    same = estimate(k.interleaved_stores, X, same_slice=True)
    assert apart.dma_bytes == same.dma_bytes
    # the same slice: each store waits for the one before it, fixed latency (1.3 us) included
    assert same.makespan_ns > 8 * 1300
    assert apart.makespan_ns < 0.5 * same.makespan_ns


def _view(arr: np.ndarray, key: tuple[slice, ...]) -> tuple[object, ...]:
    """The stride pattern the recorder gives a view of HBM tensor `arr` (its region's last
    entry)."""
    return _Tile(arr, on_chip=False).region(arr[key])[4]  # type: ignore[return-value]


@pytest.mark.parametrize(("a", "b", "disjoint"), [
    # row bands of every channel: ranges overlap, elements do not
    ((slice(0, 64), slice(0, 4), slice(0, 126)), (slice(0, 64), slice(4, 8), slice(0, 126)), True),
    ((slice(0, 64), slice(0, 4), slice(0, 126)), (slice(0, 64), slice(2, 6), slice(0, 126)), False),
    # column halves of the same rows
    ((slice(0, 8), slice(0, 32), slice(0, 63)), (slice(0, 8), slice(0, 32), slice(63, 126)), True),
    ((slice(0, 8), slice(0, 32), slice(0, 64)), (slice(0, 8), slice(0, 32), slice(63, 127)), False),
    # every other element: even against odd columns
    ((slice(0, 4), slice(0, 4), slice(0, 126, 2)), (slice(0, 4), slice(0, 4), slice(1, 126, 2)),
     True),
    ((slice(0, 4), slice(0, 4), slice(0, 126, 2)), (slice(0, 4), slice(0, 4), slice(2, 126, 2)),
     False),
    # a reversed view covers the same elements as the plain one
    ((slice(0, 4), slice(0, 4), slice(None, None, -1)), (slice(0, 4), slice(0, 4), slice(0, 126)),
     False),
])
def test_views_of_one_pattern_are_compared_element_by_element(
        a: tuple[slice, ...], b: tuple[slice, ...], disjoint: bool) -> None:
    arr = np.zeros((64, 32, 126), dtype=np.float32)
    assert _disjoint(_view(arr, a), _view(arr, b)) is disjoint  # type: ignore[arg-type]
    assert _disjoint(_view(arr, b), _view(arr, a)) is disjoint  # type: ignore[arg-type]


def test_views_of_different_patterns_fall_back_to_their_ranges() -> None:
    arr = np.zeros((64, 32, 126), dtype=np.float32)
    band = _view(arr, (slice(0, 64), slice(0, 4), slice(0, 126)))
    other = _view(arr, (slice(0, 32), slice(4, 8), slice(0, 126)))
    assert not _disjoint(band, other)  # type: ignore[arg-type]
    # a broadcast (stride 0) does not nest: no pattern, ranges decide
    assert _Tile(arr, on_chip=False).region(np.broadcast_to(arr[0:1], (4, 32, 126)))[4] is None
