"""Dead-code elimination (Knobs.dead_code, the legacy compiler): unread results cost nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from nkibot.sim import activate
from nkibot.sim.cost import Knobs, estimate
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent
DCE = Knobs(dead_code=True)


@pytest.fixture
def k() -> Iterator[ModuleType]:
    with activate(force=True):
        yield load_module(HERE / "kernels.py", "cost_kernels")


def test_an_unread_copy_is_removed(k: ModuleType) -> None:
    x = np.ones((128, 2048), np.float32)
    kept = estimate(k.dead_copy, x)
    gone = estimate(k.dead_copy, x, knobs=DCE)
    assert kept.instructions["vector"] == 2 and gone.instructions["vector"] == 1
    assert gone.busy_ns["vector"] == pytest.approx(kept.busy_ns["vector"] / 2)
    assert gone.makespan_ns < kept.makespan_ns
    assert gone.notes and "1 instruction" in gone.notes[0]
    assert not kept.notes


def test_a_copy_that_is_read_stays(k: ModuleType) -> None:
    x = np.ones((128, 2048), np.float32)
    rep = estimate(k.dead_copy, x, keep_copy=True, knobs=DCE)
    assert rep.instructions["vector"] == 2 and not rep.notes


def test_a_dead_chain_goes_as_a_whole_but_dmas_stay(k: ModuleType) -> None:
    x = np.ones((128, 512), np.float32)
    rep = estimate(k.dead_chain, x, knobs=DCE)
    # the second op is unread, so the first (read only by the second) is dead too
    assert rep.instructions["vector"] == 0
    assert rep.instructions["dma"] == 2  # the load is read by the store, which writes HBM
    assert estimate(k.dead_chain, x).instructions["vector"] == 2


def test_a_setitem_is_an_instruction_with_operands(k: ModuleType) -> None:
    """`s[...] = t` is read by the next op: kept, and the op waits for it."""
    x = np.ones((128, 2048), np.float32)
    rep = estimate(k.setitem_then_read, x, knobs=DCE)
    assert rep.instructions["vector"] == 2 and not rep.notes
    # the copy (one input: ~N cycles) then the op, one after the other on VectorE
    assert rep.critical_path_ns.get("vector", 0.0) >= 2 * 2048 / 1.12 * 0.99


def test_register_accumulation_is_never_dead(k: ModuleType) -> None:
    """The first pass writes an unread tile, but it feeds the accumulation registers."""
    x = np.ones((128, 512), np.float32)
    rep = estimate(k.register_sum, x, knobs=DCE)
    assert rep.instructions["scalar"] == 2 and not rep.notes
