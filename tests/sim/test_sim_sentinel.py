"""New tensors hold the official sentinel (NaN, 4 for integers) wherever nothing wrote, and
the simulator writes that sentinel only when someone could observe it: a write that covers
a fresh tile skips it (white-box: the tests look at the allocation's pending fill)."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from nkibot.sim.storage import handle
from nkibot.sim.storage import values as peek


def _src(nl: ModuleType, shape: tuple[int, ...]) -> object:
    t = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
    peek(t)[...] = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 100
    return t


def test_a_covering_write_skips_the_fill(nl: ModuleType, nisa: ModuleType) -> None:
    """An activation into a whole fresh tile leaves nothing to fill; its values are the
    activation's."""
    src = _src(nl, (128, 64))
    dst = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    assert np.isnan(handle(dst).alloc.unfilled)
    nisa.activation(dst=dst, op=nl.exp, data=src)
    assert handle(dst).alloc.unfilled is None
    np.testing.assert_allclose(peek(dst), np.exp(peek(src)), rtol=1e-6)


def test_reshaped_transposed_and_bitcast_views_cover(nl: ModuleType, nisa: ModuleType) -> None:
    """A write through a reshape, a transpose or a same-size bitcast of the whole tile
    covers it; a bitcast to a narrower type covers it too (twice the elements)."""
    src = _src(nl, (128, 64))
    shaped = nl.ndarray((128, 8, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=shaped.reshape((128, 64)), op=nl.copy, data=src)
    assert handle(shaped).alloc.unfilled is None
    np.testing.assert_array_equal(peek(shaped).reshape(128, 64), peek(src))
    words = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=words.view(nl.float32), src=src)
    assert handle(words).alloc.unfilled is None
    np.testing.assert_array_equal(peek(words).view(np.float32), peek(src))


def test_a_partial_write_fills_the_rest_first(nl: ModuleType, nisa: ModuleType) -> None:
    """NaN (floats) and 4 (integers) remain exactly where nothing wrote."""
    src = _src(nl, (128, 64))
    dst = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=dst[:, 0:40], op=nl.copy, data=src[:, 0:40])
    got = peek(dst)
    assert np.isnan(got[:, 40:]).all()
    np.testing.assert_array_equal(got[:, :40], peek(src)[:, :40])
    half = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=half[0:64], op=nl.copy, data=src[0:64])
    assert np.isnan(peek(half)[64:]).all()
    ints = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.sbuf)
    sevens = nl.ndarray((128, 3), dtype=nl.int32, buffer=nl.sbuf)
    peek(sevens)[...] = 7
    nisa.tensor_copy(dst=ints[:, 0:3], src=sevens)
    assert (peek(ints)[:, 3:] == 4).all() and (peek(ints)[:, :3] == 7).all()


def test_a_read_before_any_write_sees_nan(nl: ModuleType, nisa: ModuleType) -> None:
    """Reading a never-written tile observes the sentinel (and writes it)."""
    fresh = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=out, op=nl.exp, data=fresh)
    assert np.isnan(peek(out)).all()
    assert handle(fresh).alloc.unfilled is None and np.isnan(peek(fresh)).all()


def test_a_matmul_into_part_of_fresh_psum_leaves_nan_around_it(nl: ModuleType,
                                                                nisa: ModuleType) -> None:
    """A matmul group over half a PSUM tile: the other half is still the sentinel, and a
    matmul over the whole tile needs no fill."""
    lhs = _src(nl, (128, 128))
    rhs = _src(nl, (128, 64))
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc[:, 0:32], lhs, rhs[:, 0:32])
    got = peek(acc)
    assert np.isnan(got[:, 32:]).all()
    np.testing.assert_allclose(got[:, :32], peek(lhs).T @ peek(rhs)[:, :32], rtol=1e-5)
    whole = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(whole, lhs, rhs)
    assert handle(whole).alloc.unfilled is None
    np.testing.assert_allclose(peek(whole), peek(lhs).T @ peek(rhs), rtol=1e-5)
