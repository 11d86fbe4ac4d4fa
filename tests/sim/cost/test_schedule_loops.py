"""Loop vectorization (legacy compiler) and gap filling in the cost model's schedule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from nkibot.sim import activate
from nkibot.sim.cost import Knobs, estimate
from nkibot.sim.cost import constants as C
from nkibot.sim.cost.timeline import Timeline, earliest
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent
LEGACY = Knobs(loop_vectorize=True)


@pytest.fixture
def k() -> Iterator[ModuleType]:
    with activate(force=True):
        yield load_module(HERE / "kernels.py", "cost_kernels_loops")


def _window(k: ModuleType, knobs: Knobs | None, trip: int = 64, fn: str = "sliding_window"):
    x, w = np.ones((128, trip + 2), np.float32), np.ones((128, 3), np.float32)
    kw = {"trip": trip} if fn == "sliding_window" else {}
    return estimate(getattr(k, fn), x, w, knobs=knobs, **kw)


def test_a_small_affine_loop_is_costed_as_one_vectorised_body(k: ModuleType) -> None:
    eager, legacy = _window(k, None), _window(k, LEGACY)
    assert eager.instructions["vector"] == 128 and legacy.instructions["vector"] == 2
    # tensor_tensor: two inputs, 64 x 3 elements: 2 * 192 cycles; reduce 192 cycles; the
    # reduce reads what the multiply wrote: + the dependent overhead (ARCH1:393-403)
    cycles = 2 * 192 + 192 + C.DEPENDENT_OVERHEAD.value
    assert legacy.busy_ns["vector"] == pytest.approx(cycles / 1.12)
    # eager: 64 pairs of a multiply (6 cycles: the 64-cycle access minimum) and a dependent
    # reduce (3 cycles streaming + the 100-cycle static overhead, ARCH1:403)
    pair = C.ACCESS_OVERHEAD.value + 3 + C.DEPENDENT_OVERHEAD.value
    assert eager.busy_ns["vector"] == pytest.approx(64 * pair / 1.12)
    assert legacy.busy_ns["vector"] < eager.busy_ns["vector"] / 15
    assert legacy.makespan_ns < eager.makespan_ns
    # the vectorised reduce still waits for the store's tile: the output is stored after it
    assert legacy.makespan_ns > legacy.busy_ns["vector"] + legacy.busy_ns["dma"]


def test_loops_too_large_or_sequential_are_not_vectorised(k: ModuleType) -> None:
    big = _window(k, LEGACY, trip=C.VECTORIZE_MAX_FREE // 3 + 1)
    assert big.instructions["vector"] == 2 * (C.VECTORIZE_MAX_FREE // 3 + 1)
    seq = _window(k, LEGACY, fn="sliding_window_sequential")
    assert seq.instructions["vector"] == 128
    # a loop with a DMA in it stays as it is
    assert estimate(k.matmuls, np.ones((128, 128), np.float32), np.ones((128, 512), np.float32),
                    knobs=LEGACY).instructions["tensor"] == 4


def test_an_instruction_fills_an_idle_gap_before_a_later_one(k: ModuleType) -> None:
    x, y = np.ones((128, 8192), np.float32), np.ones((128, 2048), np.float32)
    gaps = estimate(k.late_independent, x, y)
    strict = estimate(k.late_independent, x, y, knobs=Knobs(fill_gaps=False))
    assert gaps.busy_ns == strict.busy_ns
    assert gaps.makespan_ns < strict.makespan_ns


def test_timeline_finds_the_first_gap_free_on_every_resource() -> None:
    a, b = Timeline(), Timeline()
    a.add(0.0, 10.0)
    a.add(20.0, 30.0)
    b.add(12.0, 15.0)
    assert earliest([a], 0.0, 5.0) == 10.0
    assert earliest([a, b], 0.0, 5.0) == 15.0  # 10-12 is too short on b
    assert earliest([a, b], 0.0, 11.0) == 30.0
    a.add(10.0, 20.0)  # back to back: merged into one interval
    assert a.starts == [0.0] and a.ends == [30.0]
