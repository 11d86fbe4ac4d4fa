"""The API surface around the instructions: nki.typing, NKIObject, with_schedule, the
NkiTensor access-pattern queries, and the smaller new instructions."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import ConstraintError, activate

F32 = np.float32


def test_nki_typing_tensor_is_a_subscriptable_annotation(nki: ModuleType) -> None:
    from nki.typing import tensor

    assert repr(tensor[128, 512]) == "tensor[128, 512]"


def test_nkiobject_subclasses_behave_like_dataclasses(nki: ModuleType) -> None:
    import nki.language as nl

    class C(nl.NKIObject):
        x: int
        y: bool = False

        def toggle(self) -> None:
            self.y = not self.y

    c = C(1)
    c.toggle()
    assert (c.x, c.y) == (1, True) and C(2) == C(2) and C(2) != C(3)

    @dataclass
    class D(nl.NKIObject):
        a: int
        b: float = 2.0

    assert D(3) == D(3, 2.0)


def test_with_schedule_keeps_edges_and_refuses_malformed_ones(nki: ModuleType) -> None:
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def k(t: Any) -> Any:
        x = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=t)
        a = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
        nisa.reciprocal(dst=a, data=x, name="recip")
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    s = k.with_schedule([("plus1", ["recip"]), ("other", "recip")])
    assert s.schedule == (("plus1", ("recip",)), ("other", ("recip",)))
    t = np.full((4, 4), 2.0, F32)
    np.testing.assert_array_equal(s(t), np.full((4, 4), 0.5, F32))
    with pytest.raises(ConstraintError, match="with_schedule"):
        k.with_schedule([("lonely",)])


def test_view_patterns_offsets_and_rearrange(nki: ModuleType) -> None:
    """The nki-aps.rst example: a column slice is [[64, 128], [1, 16]] at offset 8."""
    import nki.language as nl

    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    u = t[:, 8:24]
    assert u.get_pattern() == [[64, 128], [1, 16]] and u.offset == 8
    v = t.ap(pattern=[[64, 128], [1, 16]], offset=8)
    assert v.get_pattern() == u.get_pattern() and v.offset == u.offset
    assert t.is_contiguous() and not u.is_contiguous() and not u.is_indirect()
    r = nl.ndarray((128, 24), dtype=nl.float32, buffer=nl.sbuf)
    assert r.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}).shape == (128, 6, 4)


def test_ap_pairs_passed_one_by_one(nki: ModuleType) -> None:
    """nki-aps.rst:158 writes `src.ap([32, 16], [1, 32])`: two pairs, no offset."""
    import nki.language as nl

    t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    v = t[:, 4:12].ap([32, 16], [1, 8])
    assert v.get_pattern() == [[32, 16], [1, 8]] and v.offset == 4 and v.shape == (16, 8)
    assert t.ap([[32, 16], [1, 32]], 0).shape == (16, 32)


def test_ap_partition_step_must_be_the_free_size(nki: ModuleType) -> None:
    """nki-aps.rst:201-206: a first step of 32*2 reads every other partition: illegal."""
    import nki.language as nl

    t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    with pytest.raises(ConstraintError) as info:
        t.ap(pattern=[[64, 8], [1, 32]], offset=0)
    assert info.value.rule == "view-illegal" and "partition step 64" in info.value.detail
    assert t.ap(pattern=[[32, 8], [1, 32]], offset=0).shape == (8, 32)
    assert t.ap(pattern=[[64, 16], [1, 64]], dtype=nl.bfloat16).shape == (16, 64)
    h = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    assert h.ap(pattern=[[64, 8], [1, 32]]).shape == (8, 32)  # HBM: any pattern


def test_while_on_a_register_runs_until_it_holds_zero(nki: ModuleType) -> None:
    """`while reg:` tests the register's integer (nki/get-started/about/index.rst:227)."""
    import nki.isa as nisa
    import nki.language as nl

    def k(x: Any) -> Any:
        cond = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        acc = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0)
        reg = nisa.register_alloc(5)
        while reg:
            nisa.register_store(cond, reg)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=cond, op=nl.add)
            nisa.tensor_scalar(cond, cond, nl.add, -1)
            nisa.register_load(reg, cond)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    assert _run(nki, k, np.zeros((1, 1), F32)).item() == 5 + 4 + 3 + 2 + 1


@pytest.mark.parametrize("loop", [
    "for _ in nl.dynamic_range(n):\n            pass",
    "nl.fori_loop(0, n, lambda i: None)",
    "nl.while_loop(nisa.register_alloc(0), lambda r: r)",
])
def test_dynamic_loops_are_refused_inside_no_reorder(nki: ModuleType, loop: str) -> None:
    """nki-dynamic-loops.rst:135-136 and nl.no_reorder's docstring: not supported."""
    import nki.isa as nisa
    import nki.language as nl

    n = nisa.register_alloc(3)
    with pytest.raises(ConstraintError) as info, nl.no_reorder():
        exec(loop, {"nl": nl, "nisa": nisa, "n": n})
    assert info.value.rule == "loop-illegal"
    for _ in nl.dynamic_range(n):  # the documented workaround: no_reorder in the body
        with nl.no_reorder():
            pass
    nl.fori_loop(0, n, lambda i: None)  # and outside a no_reorder block, fine


def _run(nki: ModuleType, body: Any, *arrays: Any) -> Any:
    return nki.simulate(nki.jit(body))(*arrays)


def test_sequence_bounds_follows_segments(nki: ModuleType) -> None:
    import nki.isa as nisa
    import nki.language as nl

    def k(seg: Any) -> Any:
        s = nl.load(seg)
        d = nl.ndarray((1, 2, seg.shape[1]), dtype=seg.dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=d, segment_ids=s)
        out = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=d)
        return out

    seg = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], F32)
    out = _run(nki, k, seg)
    np.testing.assert_array_equal(out[0], [[9, 1, 1, 3, 3, 3, 9, 7, 7],
                                           [-1, 3, 3, 6, 6, 6, -1, 9, 9]])


def test_local_gather_matches_the_per_core_numpy_semantics(nki: ModuleType) -> None:
    import nki.isa as nisa
    import nki.language as nl

    g = np.random.default_rng(0)
    src = g.random((32, 64, 4), dtype=F32)
    per_core = g.integers(0, 64, (16, 2)).astype(np.uint16)
    index = np.tile(per_core, (2, 1)) * 4

    def k(s: Any, i: Any) -> Any:
        st, it = nl.load(s), nl.load(i)
        d = nl.ndarray((32, 32, 4), dtype=s.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=d, src_buffer=st, index=it, num_elem_per_idx=4)
        out = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=d)
        return out

    ref = np.empty((32, 32, 4), F32)
    for c in range(2):
        ids = (index[16 * c:16 * c + 16] // 4).flatten(order="F")
        ref[16 * c:16 * c + 16] = np.take(src[16 * c:16 * c + 16], ids, axis=1)
    np.testing.assert_array_equal(_run(nki, k, src, index), ref)


def test_topk_reads_the_16_partition_snake(nki: ModuleType) -> None:
    import nki.isa as nisa
    import nki.language as nl

    n, k_ = 42, 8
    src = np.random.default_rng(1).permutation(16 * 3).reshape(16, 3).astype(
        ml_dtypes.bfloat16)

    def k(s: Any) -> Any:
        st = nl.load(s)
        v = nl.ndarray((16, k_), dtype=nl.bfloat16, buffer=nl.sbuf)
        i = nl.ndarray((16, k_), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=v, idx_dst=i, src=st, n=n)
        ov = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
        oi = nl.ndarray(i.shape, dtype=i.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=ov, src=v)
        nisa.dma_copy(dst=oi, src=i)
        return ov, oi

    vals, idx = _run(nki, k, src)
    snake = src.astype(F32).T.reshape(-1)[:n]
    order = np.argsort(snake)[-k_:]
    np.testing.assert_array_equal(vals[0].astype(F32), snake[order])
    np.testing.assert_array_equal(idx[5], order)


def test_nonzero_with_count_and_rng_state_need_trn2() -> None:
    with activate(force=True, target="trn2") as nki:
        assert nki is not None
        import nki.isa as nisa
        import nki.language as nl

        def k(x: Any) -> Any:
            t = nl.load(x)
            d = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.memset(dst=d, value=7)
            nisa.nonzero_with_count(dst=d, src=t, index_offset=16, padding_val=-1)
            st = nl.ndarray((x.shape[0], 6), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rand_get_state(dst=st)
            a = nl.ndarray((x.shape[0], 4), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=a, engine=nisa.engine.gpsimd)
            nisa.rand_set_state(src_seeds=st)
            b = nl.ndarray((x.shape[0], 4), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=b, engine=nisa.engine.gpsimd)
            outs = []
            for t_ in (d, a, b):
                o = nl.ndarray(t_.shape, dtype=t_.dtype, buffer=nl.shared_hbm)
                nisa.dma_copy(dst=o, src=t_)
                outs.append(o)
            return tuple(outs)

        x = np.zeros((32, 8), np.int32)
        x[0, [1, 2, 5]] = 1
        d, a, b = nki.simulate(nki.jit(k))(x)
    np.testing.assert_array_equal(d[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])
    np.testing.assert_array_equal(d[1], [7] * 9)  # only partitions 0, 16, ... are written
    np.testing.assert_array_equal(a, b)  # saving and restoring the state replays the stream


def test_language_rand_seed_dropout_gather(nki: ModuleType) -> None:
    import nki.isa as nisa
    import nki.language as nl

    def k(data: Any, idx: Any) -> Any:
        seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
        nl.random_seed(seed)
        a = nl.rand((128, 64), dtype=nl.float32)
        nl.random_seed(seed)
        b = nl.rand((128, 64), dtype=nl.float32)
        dropped = nl.dropout(nl.load(data), rate=1.0)
        g = nl.gather_flattened(nl.load(data), nl.load(idx))
        outs = []
        for t in (a, b, dropped, g):
            o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=t)
            outs.append(o)
        return tuple(outs)

    data = np.arange(128 * 16, dtype=F32).reshape(128, 16)
    idx = np.random.default_rng(2).integers(0, 16, (128, 16)).astype(np.uint32)
    a, b, dropped, g = _run(nki, k, data, idx)
    np.testing.assert_array_equal(a, b)  # the same seed, the same numbers
    assert a.min() >= 0.0 and a.max() < 1.0 and 0.45 < a.mean() < 0.55
    np.testing.assert_array_equal(dropped, 0.0)
    np.testing.assert_array_equal(g, np.take_along_axis(data, idx.astype(np.int64), axis=1))


def test_an_output_argument_the_kernel_wrote_is_a_result(nki: ModuleType) -> None:
    """nisa.dma_copy's own scatter example returns its `output` parameter."""
    import nki.isa as nisa
    import nki.language as nl

    def k(src_data: Any, indices: Any, output: Any) -> Any:
        p, f = src_data.shape
        src = nl.ndarray((p, f), dtype=src_data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=src_data)
        idx = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices)
        nisa.dma_copy(dst=output.ap(pattern=[[f, p], [1, f]], vector_offset=idx,
                                    indirect_dim=0), src=src)
        return output

    g = np.random.default_rng(5)
    ind = g.permutation(64)[:32].reshape(32, 1).astype(np.uint32)
    src = g.random((32, 16), dtype=F32)
    out = np.zeros((64, 16), F32)
    ref = out.copy()
    ref[ind[:, 0]] = src
    np.testing.assert_array_equal(_run(nki, k, src, ind, out), ref)


def test_abs_max_and_abs_min_return_the_signed_input() -> None:
    """nl.abs_max / abs_min (Trn3): the signed value of larger / smaller magnitude, y on
    ties, with a [P, 1] column applied along the free axis (as their docs show)."""
    with activate(force=True, target="trn3") as nki:
        assert nki is not None
        import nki.isa as nisa
        import nki.language as nl

        def k(a: Any, b: Any) -> Any:
            x, y = nl.load(a), nl.load(b)
            outs = []
            for t in (nl.abs_max(x, y), nl.abs_min(x, y)):
                o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
                nisa.dma_copy(dst=o, src=t)
                outs.append(o)
            return tuple(outs)

        a = np.array([[-5.0, 1.0, 2.0]], F32).repeat(4, 0)
        b = np.array([[3.0], [-1.0], [-2.0], [0.5]], F32)
        hi, lo = nki.simulate(nki.jit(k))(a, b)
    ax, bx = np.abs(a), np.abs(b)
    np.testing.assert_array_equal(hi, np.where(ax > bx, a, np.broadcast_to(b, a.shape)))
    np.testing.assert_array_equal(lo, np.where(ax < bx, a, np.broadcast_to(b, a.shape)))
