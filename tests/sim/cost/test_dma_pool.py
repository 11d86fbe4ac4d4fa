"""The DMA pool's gap index places every transfer where a plain walk of the pool would."""

from __future__ import annotations

import random

import pytest

from nkibot.sim.cost.schedule import DMA_GAPS_KEPT
from nkibot.sim.cost.timeline import Pool


class WalkPool:
    """The reference: walk the busy intervals from the start for the first gap that fits."""

    def __init__(self, keep: int) -> None:
        self.keep, self.busy, self.floor = keep, [], 0.0
        self.busy: list[tuple[float, float]]

    def place(self, ready: float, length: float) -> float:
        slot, at = max(ready, self.floor), len(self.busy)
        for i, (s, e) in enumerate(self.busy):
            if slot + length <= s:
                at = i
                break
            slot = max(slot, e)
        self.busy.insert(at, (slot, slot + length))
        if len(self.busy) > self.keep:
            self.floor = max(self.floor, self.busy[self.keep // 2 - 1][1])
            del self.busy[: self.keep // 2]
        return slot


@pytest.mark.parametrize("seed", range(6))
def test_pool_places_as_the_walk_does(seed: int) -> None:
    rng = random.Random(seed)
    pool, walk = Pool(16), WalkPool(16)
    clock = 0.0
    for _ in range(2000):
        clock += rng.choice([0.0, 0.5, 1.0, 3.0])
        # early-ready transfers (they fill gaps), late ones, zero-length ones, exact ties
        ready = rng.choice([0.0, clock, clock - 5.0, float(int(clock))])
        length = rng.choice([0.0, 0.5, 1.0, 2.0, 7.0])
        assert pool.place(ready, length) == walk.place(ready, length)
    assert pool.busy == walk.busy and pool.floor == walk.floor


def test_back_to_back_run_is_skipped_not_walked() -> None:
    """A long back-to-back run leaves one gap entry, so placement does not walk it."""
    pool = Pool(1 << 20)
    for i in range(1000):
        assert pool.place(0.0, 1.0) == float(i)
    assert len(pool.gap_ends) == 2  # before the run, and the open end after it
    assert pool.place(0.0, 1.0) == 1000.0


def test_a_prefetch_fills_the_gaps_of_an_iterations_transfers() -> None:
    """A transfer ready early (the next iteration's input, double-buffered) takes the idle
    time between the transfers placed after its ready time, 150 of them here (one short
    store a tile, as a conv's output tiles make): the pool keeps that many intervals."""
    pool = Pool(DMA_GAPS_KEPT)
    for i in range(150):
        pool.fill(2.0 * i, 1.0)  # busy [2i, 2i + 1]
    assert pool.fill(0.0, 100.0) == (1.0, 200.0)  # the first 100 gaps of 1.0
    forgetful = Pool(64)  # the bound before 2026-12-07
    for i in range(150):
        forgetful.fill(2.0 * i, 1.0)
    assert forgetful.fill(0.0, 100.0)[0] > 100.0
