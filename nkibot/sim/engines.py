"""Shared instruction plumbing: operand checks, fp32 reads, rounded writes, counting.

Every `nl`/`nisa` instruction goes through these few helpers so that the hardware
rules (buffers, partition sizes and matching, read-only views) are enforced in one
place and the per-instruction Python overhead stays small.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.errors import fail
from nkibot.sim.psum import settle, unpin
from nkibot.sim.state import current
from nkibot.sim.tensor import (
    ON_CHIP,
    PMAX,
    PSUM_DRAINED,
    PSUM_MATMUL,
    PSUM_OTHER,
    MemoryRegion,
    NkiTensor,
)

Arr = np.ndarray[Any, Any]
F32 = np.dtype(np.float32)


def tensor(t: Any, op: str, role: str) -> NkiTensor:
    if not isinstance(t, NkiTensor):
        raise fail("unsupported", f"{op}: {role} must be a tensor, got {type(t).__name__}")
    return t


def on_chip(x: Any, op: str, role: str, allow_psum: bool = True) -> NkiTensor:
    """A tile operand: SBUF (or PSUM when allowed), partition dim at most 128."""
    t = tensor(x, op, role)
    if t.buffer not in ON_CHIP or (not allow_psum and t.buffer is MemoryRegion.psum):
        legal = "SBUF or PSUM" if allow_psum else "SBUF"
        raise fail("buffer-illegal", f"{op}: operand '{role}' is {t.describe()}; it must be in "
                                     f"{legal}")
    if t.shape[0] > PMAX:
        raise fail("partition-dim", f"{op}: operand '{role}' {t.describe()} has partition dim "
                                    f"{t.shape[0]} > 128")
    return t


def in_buffer(t: NkiTensor, op: str, role: str, *allowed: MemoryRegion) -> None:
    if t.buffer not in allowed:
        names = "/".join(a.value for a in allowed)
        raise fail("buffer-illegal", f"{op}: operand '{role}' is {t.describe()}; it must be "
                                     f"in {names}")


def free_size(t: NkiTensor) -> int:
    return t.size // t.shape[0] if t.shape else 1


def same_partitions(op: str, *named: tuple[str, NkiTensor]) -> None:
    first_role, first = named[0]
    for role, t in named[1:]:
        if t.shape[0] != first.shape[0]:
            raise fail("partition-mismatch", f"{op}: '{role}' {t.describe()} has "
                                             f"{t.shape[0]} partitions but '{first_role}' "
                                             f"{first.describe()} has {first.shape[0]}")


def same_elements(op: str, *named: tuple[str, NkiTensor]) -> None:
    """Equal partitions and equal elements per partition (shapes may differ otherwise)."""
    same_partitions(op, *named)
    first_role, first = named[0]
    for role, t in named[1:]:
        if t.size != first.size:
            raise fail("shape-mismatch", f"{op}: '{role}' {t.describe()} has {free_size(t)} "
                                         f"elements per partition but '{first_role}' "
                                         f"{first.describe()} has {free_size(first)}")


def read(t: NkiTensor, compute: np.dtype[Any] = F32) -> Arr:
    """The operand's values in the compute dtype (no copy when already fp32)."""
    if t._alloc.pending:
        settle(t._alloc)
    st = t._state
    if st is not None and not t._readonly:
        # Reading matmul results out of PSUM ends that accumulation group.
        st[st == PSUM_MATMUL] = PSUM_DRAINED
    arr = t._arr
    if arr.dtype == compute:
        return arr
    return arr.astype(compute)


def read_native(t: NkiTensor) -> Arr:
    return read(t, t._arr.dtype)


def compute_dtype(*ts: Any) -> np.dtype[Any]:
    """fp32, or int64 when every tensor operand is an integer type (GpSimd integer math)."""
    tiles = [t for t in ts if isinstance(t, NkiTensor)]
    if tiles and all(not dtypes.is_float(t.dtype) for t in tiles):
        return np.dtype(np.int64)
    return F32


def write(dst: NkiTensor, value: Any, op: str) -> None:
    """Round `value` on write into `dst`, marking PSUM as written by a non-matmul engine."""
    if dst._readonly:
        raise fail("read-only", f"{op}: cannot write into broadcast view {dst.describe()}")
    alloc = dst._alloc
    if alloc.pending:
        settle(alloc)
    if alloc.pinned_by:
        unpin(alloc)
    arr = dst._arr
    if isinstance(value, np.ndarray) and value.shape != arr.shape:
        value = value.reshape(arr.shape)
    dtypes.write(arr, value, dst.dtype)
    if type(dst) is not NkiTensor:  # an indirect (scatter) view: write through to storage
        from nkibot.sim.indirect import scatter

        scatter(dst)
    if dst._state is not None:
        dst._state[...] = PSUM_OTHER


def count(engine: str, elements: int) -> None:
    current().count(engine, elements)


def scalar_operand(v: Any, data: NkiTensor, op: str, role: str) -> Any:
    """A compile-time scalar, or a [P,1] tile broadcast along the free dims of `data`."""
    if isinstance(v, NkiTensor):
        on_chip(v, op, role)
        if v.shape[0] != data.shape[0] or free_size(v) != 1:
            raise fail("broadcast", f"{op}: '{role}' {v.describe()} must be a scalar or "
                                    f"[{data.shape[0]}, 1] tile for data {data.describe()}")
        col = read(v).reshape(v.shape[0], *([1] * (data.ndim - 1)))
        return col
    if isinstance(v, int | float | np.number | bool):
        return np.float32(v)
    raise fail("unsupported", f"{op}: '{role}' must be a scalar or a [P,1] tile, got {v!r}")


def assign(dst: NkiTensor, value: Any) -> None:
    """`tile[...] = value`: an on-chip copy (or fill from a scalar) on the Vector engine."""
    on_chip(dst, "setitem", "dst")
    if isinstance(value, NkiTensor):
        on_chip(value, "setitem", "value")
        if value.shape != dst.shape:
            same_elements("setitem", ("dst", dst), ("value", value))
        write(dst, read(value, compute_dtype(value)), "setitem")
    else:
        write(dst, np.float32(value) if dtypes.is_float(dst.dtype) else value, "setitem")
    count("vector", dst.size)
