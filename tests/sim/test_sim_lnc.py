"""LNC=2 launches: logical cores on threads of their own, core_barrier and sendrecv for real.

Our own kernels: each core writes its half of a shared scratch and reads the other core's
half after a barrier (without the barrier the read sees unwritten memory), a ring
exchange with values that differ per core, and the mismatches that must raise rather
than hang.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from nkibot.sim import ConstraintError, KernelError, activate, stats
from nkibot.sim.cost import estimate
from tests.sim.sim_helpers import load_module

HEADER = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n"


@pytest.fixture
def sim() -> Iterator[ModuleType]:
    """Our `nki` for trn2, the first generation with core_barrier and sendrecv."""
    with activate(force=True, target="trn2") as mod:
        assert mod is not None
        yield mod


@pytest.fixture
def kernels(tmp_path: Path, sim: ModuleType) -> Callable[[str], ModuleType]:
    counter = [0]

    def write(source: str) -> ModuleType:
        counter[0] += 1
        path = tmp_path / f"lnc_kernel{counter[0]}.py"
        path.write_text(HEADER + textwrap.dedent(source))
        return load_module(path, f"lnc_kernel{counter[0]}")

    return write


HALVES = """
    @nki.jit
    def halves(x):
        # core p scales rows [p*h, (p+1)*h) by p + 2 into a shared scratch, then copies the
        # OTHER core's half of the scratch to its half of the output
        P, F = x.shape
        h = P // 2
        p = nl.program_id(0)
        scratch = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((h, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[p * h:(p + 1) * h, :])
        s = nl.ndarray((h, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=s, data=t, op0=nl.multiply, operand0=float(p + 2))
        nisa.dma_copy(dst=scratch[p * h:(p + 1) * h, :], src=s)
        BARRIER
        o = 1 - p
        u = nl.ndarray((h, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=scratch[o * h:(o + 1) * h, :])
        nisa.dma_copy(dst=out[p * h:(p + 1) * h, :], src=u)
        return out
    """


def _halves(kernels: Callable[[str], ModuleType], barrier: bool) -> Any:
    line = "nisa.core_barrier(data=scratch, cores=(0, 1))" if barrier else "pass"
    return kernels(HALVES.replace("BARRIER", line)).halves


def _x(p: int = 64, f: int = 16) -> np.ndarray[Any, Any]:
    return np.random.default_rng(0).standard_normal((p, f)).astype(np.float32)


def test_barrier_orders_the_cores_writes_before_the_other_core_reads(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    x = _x()
    got = sim.simulate(_halves(kernels, barrier=True)[2])(x)
    np.testing.assert_array_equal(got, np.concatenate([x[32:] * 3, x[:32] * 2]))


def test_without_the_barrier_the_unordered_accesses_raise(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    """The same kernel without core_barrier: core 0 reads core 1's half of the scratch
    before core 1 writes it (a write-after-read race), so the launch is refused."""
    with pytest.raises(ConstraintError) as info:
        sim.simulate(_halves(kernels, barrier=False)[2])(_x())
    assert info.value.rule == "lnc-race"
    assert "core 1 writes shared_hbm[32, 16]" in info.value.detail
    assert "which core 0 read" in info.value.detail


def test_a_read_that_happens_to_come_after_the_write_is_still_a_race(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    """Core 0 runs first, so core 1 would read the right values; no barrier orders it."""
    source = """
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            if p == 0:
                nisa.dma_copy(dst=t, src=x)
                nisa.dma_copy(dst=scratch, src=t)
            BARRIER
            if p == 1:
                nisa.dma_copy(dst=t, src=scratch)
                nisa.dma_copy(dst=out, src=t)
            return out
        """
    x = _x(16, 8)
    racy = kernels(source.replace("BARRIER", "pass")).k
    with pytest.raises(ConstraintError) as info:
        sim.simulate(racy[2])(x)
    assert info.value.rule == "lnc-race" and "core 1 reads" in info.value.detail
    fixed = kernels(source.replace("BARRIER", "nisa.core_barrier(data=scratch, cores=(0, 1))")).k
    np.testing.assert_array_equal(sim.simulate(fixed[2])(x), x)


def test_cores_writing_disjoint_rows_need_no_barrier(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            h = x.shape[0] // 2
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[p * h:(p + 1) * h, :])
            nisa.dma_copy(dst=out[p * h:(p + 1) * h, :], src=t)
            return out
        """)
    x = _x(16, 8)
    np.testing.assert_array_equal(sim.simulate(mod.k[2])(x), x)


def test_ring_exchange_delivers_each_cores_values(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def ring(x):
            P, F = x.shape
            p = nl.program_id()
            out = nl.ndarray((2, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x)
            b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=b, data=a, op0=nl.add, operand0=float(10 * p + 1))
            got = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.sendrecv(src=b, dst=got, send_to_rank=(p + 1) % 2,
                          recv_from_rank=(p - 1) % 2, pipe_id=0)
            # a second round on another pipe: swap in place (src is dst)
            nisa.sendrecv(src=got, dst=got, send_to_rank=1 - p, recv_from_rank=1 - p,
                          pipe_id=1)
            nisa.dma_copy(dst=out[p], src=got)
            return out
        """)
    x = _x(32, 8)
    got = sim.simulate(mod.ring[2])(x)
    # round 1: core p holds the other core's b; round 2 swaps back: core p holds its own
    np.testing.assert_allclose(got, np.stack([x + 1, x + 11]), rtol=1e-6)
    assert stats()["instructions"]["dma"] >= 4


def test_bf16_exchange_is_bit_exact(sim: ModuleType,
                                    kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def swap(x):
            p = nl.program_id(0)
            out = nl.ndarray((2, *x.shape), dtype=x.dtype, buffer=nl.shared_hbm)
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x[p * 0:x.shape[0], :])
            b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.activation(dst=b, op=nl.copy, data=a, scale=float(p + 1))
            nisa.sendrecv(src=b, dst=b, send_to_rank=1 - p, recv_from_rank=1 - p, pipe_id=7,
                          dma_engine=nisa.dma_engine.gpsimd_dma)
            nisa.dma_copy(dst=out[p], src=b)
            return out
        """)
    import ml_dtypes

    x = _x(16, 8).astype(ml_dtypes.bfloat16)
    got = sim.simulate(mod.swap[2])(x)
    np.testing.assert_array_equal(got[0].view(np.uint16), (x * 2).astype(x.dtype).view(np.uint16))
    np.testing.assert_array_equal(got[1].view(np.uint16), x.view(np.uint16))


def test_lnc2_launch_is_deterministic(sim: ModuleType,
                                      kernels: Callable[[str], ModuleType]) -> None:
    k = _halves(kernels, barrier=True)[2]
    first = sim.simulate(k)(_x())
    for _ in range(3):
        np.testing.assert_array_equal(sim.simulate(k)(_x()), first)


MISMATCHES = {
    "one core skips the barrier": ("""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            if nl.program_id(0) == 0:
                nisa.core_barrier(data=out, cores=(0, 1))
            return out
        """, "core 0 waits in core_barrier #1", "core 1 finished"),
    "different pipe ids": ("""
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x)
            nisa.sendrecv(src=a, dst=a, send_to_rank=1 - p, recv_from_rank=1 - p, pipe_id=p)
            nisa.dma_copy(dst=x, src=a)
        """, "core 0 waits in sendrecv (pipe_id=0", "core 1 waits in sendrecv (pipe_id=1"),
    "barrier against sendrecv": ("""
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x)
            if p == 0:
                nisa.core_barrier(data=x, cores=(0, 1))
            else:
                nisa.sendrecv(src=a, dst=a, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        """, "core 0 waits in core_barrier", "core 1 waits in sendrecv"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_synchronisation_raises_instead_of_hanging(
        sim: ModuleType, kernels: Callable[[str], ModuleType], case: str) -> None:
    source, *expected = MISMATCHES[case]
    k = kernels(source).k
    started = time.monotonic()
    with pytest.raises(ConstraintError) as info:
        sim.simulate(k[2])(_x(8, 4))
    assert time.monotonic() - started < 5
    assert info.value.rule == "lnc-sync"
    assert "deadlock between logical cores" in info.value.detail
    for text in expected:
        assert text in info.value.detail
    assert info.value.where.startswith("lnc_kernel")


def test_exchange_of_different_shapes_names_both_cores(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            a = nl.ndarray((x.shape[0], x.shape[1] - 2 * p), dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=a, value=1.0)
            nisa.sendrecv(src=a, dst=a, send_to_rank=1 - p, recv_from_rank=1 - p, pipe_id=0)
        """)
    with pytest.raises(ConstraintError) as info:
        sim.simulate(mod.k[2])(_x(8, 4))
    assert info.value.rule == "shape-mismatch"
    assert "core 0 sent [8, 4] float32" in info.value.detail
    assert "core 1's dst is sbuf[8, 2]" in info.value.detail


def test_barriers_on_different_tensors_are_refused(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def k(x, y):
            nisa.core_barrier(data=x if nl.program_id(0) == 0 else y, cores=(0, 1))
        """)
    with pytest.raises(ConstraintError) as info:
        sim.simulate(mod.k[2])(_x(8, 4), _x(8, 4))
    assert info.value.rule == "lnc-sync" and "the same shared_hbm tensor" in info.value.detail


@pytest.mark.parametrize(("call", "rule", "text"), [
    ("nisa.sendrecv(src=a, dst=a, send_to_rank=1, recv_from_rank=0, pipe_id=0)",
     "lnc-sync", "only allowed when LNC"),
    ("nisa.core_barrier(data=x, cores=(0, 1))", "lnc-sync", "only allowed when LNC"),
])
def test_lnc1_launch_refuses_cross_core_instructions(
        sim: ModuleType, kernels: Callable[[str], ModuleType], call: str, rule: str,
        text: str) -> None:
    mod = kernels(f"""
        @nki.jit
        def k(x):
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=a, value=0.0)
            {call}
        """)
    with pytest.raises(ConstraintError) as info:
        sim.simulate(mod.k)(_x(8, 4))
    assert info.value.rule == rule and text in info.value.detail


@pytest.mark.parametrize(("body", "rule"), [
    # operand rules of the sendrecv docstring (nki/api/nki/isa/__init__.py:3003-3013)
    ("b = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)\n"
     "nisa.sendrecv(src=a, dst=b, send_to_rank=1, recv_from_rank=1, pipe_id=0)",
     "dtype-illegal"),
    ("nisa.sendrecv(src=a, dst=x, send_to_rank=1, recv_from_rank=1, pipe_id=0)",
     "buffer-illegal"),
    ("nisa.sendrecv(src=a, dst=a, send_to_rank=2, recv_from_rank=1, pipe_id=0)",
     "out-of-bounds"),
    ("w = nl.ndarray((8, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
     "nisa.sendrecv(src=w, dst=w, send_to_rank=1, recv_from_rank=1, pipe_id=0,"
     " dma_engine=nisa.dma_engine.gpsimd_dma)", "shape-mismatch"),
    ("nisa.core_barrier(data=a, cores=(0, 1))", "buffer-illegal"),
])
def test_operand_rules(sim: ModuleType, kernels: Callable[[str], ModuleType], body: str,
                       rule: str) -> None:
    indented = textwrap.indent(body, " " * 12).lstrip()
    mod = kernels(f"""
        @nki.jit
        def k(x):
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=a, value=0.0)
            {indented}
        """)
    with pytest.raises(ConstraintError) as info:
        sim.simulate(mod.k[2])(_x(8, 4))
    assert info.value.rule == rule


def test_trn1_has_no_cross_core_instructions(tmp_path: Path) -> None:
    path = tmp_path / "trn1_kernel.py"
    path.write_text(HEADER + textwrap.dedent(HALVES.replace(
        "BARRIER", "nisa.core_barrier(data=scratch, cores=(0, 1))")))
    with activate(force=True, target="trn1") as sim:
        assert sim is not None
        mod = load_module(path, "trn1_lnc_kernel")
        with pytest.raises(ConstraintError) as info:
            sim.simulate(mod.halves[2])(_x())
    assert info.value.rule == "arch-unsupported"


def test_cost_model_follows_each_core(sim: ModuleType,
                                      kernels: Callable[[str], ModuleType]) -> None:
    """The cost model keeps one timeline per core across the barrier's core switches."""
    k = _halves(kernels, barrier=True)
    report = estimate(k[2], _x(), target="trn2")
    assert report.makespan_ns > 0 and report.instructions["gpsimd"] >= 2


def test_an_error_on_one_core_ends_the_core_waiting_for_it(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    mod = kernels("""
        @nki.jit
        def k(x):
            if nl.program_id(0) == 1:
                raise ValueError("core 1 gives up")
            try:
                nisa.core_barrier(data=x, cores=(0, 1))
            except Exception:
                pass  # cannot keep core 0 running once core 1 failed
            return None
        """)
    started = time.monotonic()
    with pytest.raises(KernelError) as info:
        sim.simulate(mod.k[2])(_x(8, 4))
    assert time.monotonic() - started < 5
    assert info.value.rule == "kernel-exception" and "core 1 gives up" in info.value.detail


WAW = """
    @nki.jit
    def k(x):
        # each core sums its half of the rows into the same output row: last writer wins
        p = nl.program_id(0)
        h = x.shape[0] // 2
        out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[ROWS, :])
        ones = nl.ndarray((h, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        acc = nl.ndarray((1, x.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=ones, moving=t)
        s = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=acc)
        nisa.dma_copy(dst=out, src=s)
        return out
    """


def test_two_cores_storing_different_values_unordered_is_a_race(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    with pytest.raises(ConstraintError) as info:
        sim.simulate(kernels(WAW.replace("ROWS", "p * h:(p + 1) * h")).k[2])(_x(16, 8))
    assert info.value.rule == "lnc-race"
    assert "core 1 overwrites shared_hbm[1, 8]" in info.value.detail


def test_two_cores_storing_the_same_values_is_benign(
        sim: ModuleType, kernels: Callable[[str], ModuleType]) -> None:
    """Both cores sum the same rows (redundant work, same bytes): no race reported."""
    x = _x(16, 8)
    got = sim.simulate(kernels(WAW.replace("ROWS", "0:h")).k[2])(x)
    np.testing.assert_allclose(got, x[:8].sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lnc", [1, 2])
def test_a_launch_leaves_no_cyclic_garbage(sim: ModuleType,
                                          kernels: Callable[[str], ModuleType],
                                          lnc: int) -> None:
    """A finished launch is freed by reference counting alone: nothing of it (its state,
    its shared outputs' storage) waits for the cycle collector. A verification child runs
    ten trials of a kernel whose outputs may be 160 MB each; held until a full collection,
    they ran it out of memory."""
    import gc

    launch = (_halves(kernels, barrier=True)[2] if lnc == 2 else kernels("""
        @nki.jit
        def scaled(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.dma_copy(dst=scratch, src=t)
            nisa.dma_copy(dst=out, src=scratch)
            return out
        """).scaled)
    x = _x()
    sim.simulate(launch)(x)  # warm: first-call caches are not garbage
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        got = sim.simulate(launch)(x)
        del got
        gc.collect()
        kinds = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not kinds & {"RunState", "Allocation", "NkiTensor", "MemoryTracker"}, kinds
