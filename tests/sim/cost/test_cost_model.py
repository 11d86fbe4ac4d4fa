"""The cost model: documented per-instruction costs, dependencies, overlap, labels, targets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import activate
from nkibot.sim.cost import Knobs, estimate, label, target
from nkibot.sim.cost import constants as C
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent


@pytest.fixture
def k() -> Iterator[ModuleType]:
    with activate(force=True):
        yield load_module(HERE / "kernels.py", "cost_kernels")


def bf16(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32).astype(ml_dtypes.bfloat16)


def test_matmuls_cost_max_n_64_cycles_at_the_tensor_clock(k: ModuleType) -> None:
    rep = estimate(k.matmuls, bf16(128, 128), bf16(128, 512))
    # four matmuls of N=512 moving columns, bf16: 4 * 512 cycles / 2.8 GHz (ARCH1:267)
    assert rep.busy_ns["tensor"] == pytest.approx(4 * 512 / 2.8)
    assert rep.instructions["tensor"] == 4 and rep.instructions["dma"] == 3
    assert rep.flops == pytest.approx(4 * 2 * 128 * 128 * 512)


def test_fp32_matmul_is_four_times_slower(k: ModuleType) -> None:
    a, b = np.ones((128, 128), np.float32), np.ones((128, 512), np.float32)
    fast = estimate(k.matmuls, bf16(128, 128), bf16(128, 512))
    slow = estimate(k.matmuls, a, b)
    assert slow.busy_ns["tensor"] == pytest.approx(4 * fast.busy_ns["tensor"])


def test_a_consumer_waits_for_its_dma(k: ModuleType) -> None:
    x = np.ones((128, 2048), np.float32)
    rep = estimate(k.load_then_add, x)
    load = C.DMA_FIXED_NS.value + (x.nbytes / 16) / 17.0
    assert rep.busy_ns["vector"] == pytest.approx(2048 / 1.12)
    # load, then the op, then the store: nothing overlaps
    assert rep.makespan_ns > load + rep.busy_ns["vector"]
    assert rep.critical_engine in ("dma", "vector")


def test_independent_engines_overlap(k: ModuleType) -> None:
    x = np.ones((128, 1024), np.float32)
    rep = estimate(k.independent, x, x)
    compute = rep.busy_ns["scalar"] + rep.busy_ns["vector"]
    assert rep.busy_ns["scalar"] > 0 and rep.busy_ns["vector"] > 0
    loads_and_stores = 4 * C.DMA_FIXED_NS.value
    assert rep.makespan_ns < compute + loads_and_stores  # the two chains ran side by side


def test_label_and_json_say_it_is_a_model_estimate(k: ModuleType) -> None:
    rep = estimate(k.matmuls, bf16(128, 128), bf16(128, 512), target="trn2")
    d = rep.as_dict()
    assert d["label"] == label("trn2") == "model estimate (trn2), not a measurement"
    assert 0 < d["roofline_fraction"] <= 1.0
    assert set(d["utilisation"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}


def test_generations_differ_by_their_documented_clocks(k: ModuleType) -> None:
    one = estimate(k.matmuls, bf16(128, 128), bf16(128, 512), target="trn1")
    two = estimate(k.matmuls, bf16(128, 128), bf16(128, 512), target="gen3")
    assert two.busy_ns["tensor"] == pytest.approx(one.busy_ns["tensor"] * 2.8 / 2.4)
    with pytest.raises(ValueError, match="trn1, trn2, trn3"):
        target("trn9")


def test_cost_only_mode_gives_the_same_figures_as_a_full_run(k: ModuleType) -> None:
    a, b = bf16(128, 128), bf16(128, 512)
    fast = estimate(k.matmuls, a, b)
    full = estimate(k.matmuls, a, b, numerics=True)
    assert fast.cost_only and not full.cost_only
    assert fast.makespan_ns == pytest.approx(full.makespan_ns)


def test_shapes_stand_in_for_arrays(k: ModuleType) -> None:
    rep = estimate(k.matmuls, ((128, 128), "bfloat16"), ((128, 512), "bfloat16"))
    assert rep.busy_ns["tensor"] == pytest.approx(4 * 512 / 2.8)


def test_knobs_move_the_dma_figures(k: ModuleType) -> None:
    x = np.ones((128, 64), np.float32)  # 256 B per partition: descriptor-bound
    cheap = estimate(k.load_then_add, x, knobs=Knobs(dma_descriptor_ns=15.0))
    dear = estimate(k.load_then_add, x, knobs=Knobs(dma_descriptor_ns=60.0))
    assert dear.busy_ns["dma"] > cheap.busy_ns["dma"]
    assert dear.dma_efficiency < cheap.dma_efficiency < 1.0


def test_loop_body_psum_tiles_recycle_each_iteration(k: ModuleType) -> None:
    # 8 banks live per iteration; the names are rebound next iteration (NKI scopes them).
    rep = estimate(k.psum_rebind, bf16(128, 128), bf16(128, 512))
    assert rep.instructions["tensor"] == 24


def test_the_model_off_leaves_plain_runs_alone(k: ModuleType) -> None:
    with activate(force=True) as nki:
        assert nki is not None
        out = nki.simulate(k.matmuls)(bf16(128, 128), bf16(128, 512))
    assert float(out[0, 0]) == pytest.approx(4 * 128.0)


@pytest.mark.parametrize("n", [8, 2048])
def test_a_dependent_instruction_adds_the_static_overhead_to_its_streaming_time(
        k: ModuleType, n: int) -> None:
    """ARCH1:403: +100 cycles "to the above execution cost estimate" (N cycles), not to the
    ~60-cycle access minimum as well: the first op costs max(N, 64), the second N + 100."""
    rep = estimate(k.dependent_pair, np.ones((128, n), np.float32))
    first = max(n, C.ACCESS_OVERHEAD.value)
    second = n + C.DEPENDENT_OVERHEAD.value
    assert rep.busy_ns["vector"] == pytest.approx((first + second) / 1.12)


def test_an_sbuf_and_a_psum_input_stream_side_by_side(k: ModuleType) -> None:
    """Two SBUF inputs: about 2N cycles (ARCH1:393-395). One of them in PSUM: N, the
    assumption that the 2N is one memory's read interface (docs/cost-model.md)."""
    x = np.ones((128, 2048), np.float32)
    both_sbuf = estimate(k.add_from, x, x).as_dict()["top_ops"]
    split = estimate(k.add_from, x, x, psum_operand=True).as_dict()["top_ops"]
    add = {o["op"]: o["busy_us"] for o in both_sbuf}["vector:tensor_tensor"]
    add_split = {o["op"]: o["busy_us"] for o in split}["vector:tensor_tensor"]
    assert add == pytest.approx(2 * 2048 / 1.12 / 1000, rel=1e-3)
    assert add_split == pytest.approx(2048 / 1.12 / 1000, rel=1e-3)


def test_an_accumulator_in_psum_is_ranked_faster(k: ModuleType) -> None:
    x = np.ones((128, 512), np.float32)
    out_sbuf = k.accumulate_in(x)
    out_psum = k.accumulate_in(x, psum_acc=True)
    np.testing.assert_array_equal(out_sbuf, out_psum)  # the same arithmetic
    sbuf = estimate(k.accumulate_in, x)
    psum = estimate(k.accumulate_in, x, psum_acc=True)
    assert psum.busy_ns["vector"] < 0.7 * sbuf.busy_ns["vector"]
    assert psum.makespan_ns < sbuf.makespan_ns
