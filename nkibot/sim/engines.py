"""Shared instruction plumbing: operand checks, fp32 reads, rounded writes, counting.

Every `nl`/`nisa` instruction goes through these few helpers so that the hardware
rules (buffers, partition sizes and matching, read-only views) are enforced in one
place and the per-instruction Python overhead stays small. Operands are `Stored`
tensors; their storage is reached through `storage.handle` (tensor.py builds on this
module, not the other way round).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from nkibot.sim import dtypes, targets
from nkibot.sim.errors import fail
from nkibot.sim.indirect import scatter
from nkibot.sim.state import current
from nkibot.sim.storage import (
    ON_CHIP,
    PMAX,
    PSUM_DRAINED,
    PSUM_MATMUL,
    PSUM_OTHER,
    Handle,
    MemoryRegion,
    Stored,
    fill_pending,
    first_write,
    handle,
    settle,
    unpin,
)

Arr = np.ndarray[Any, Any]
F32 = np.dtype(np.float32)
#: Operands keep their own type (NkiTensor in, NkiTensor out).
T = TypeVar("T", bound=Stored)


def tensor(t: T, op: str, role: str) -> T:
    if not isinstance(t, Stored):
        raise fail("unsupported", f"{op}: {role} must be a tensor, got {type(t).__name__}")
    return t


def on_chip(x: T, op: str, role: str, allow_psum: bool = True) -> T:
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


def in_buffer(t: Stored, op: str, role: str, *allowed: MemoryRegion) -> None:
    if t.buffer not in allowed:
        names = "/".join(a.value for a in allowed)
        raise fail("buffer-illegal", f"{op}: operand '{role}' is {t.describe()}; it must be "
                                     f"in {names}")


def free_size(t: Stored) -> int:
    return t.size // t.shape[0] if t.shape else 1


def same_partitions(op: str, *named: tuple[str, Stored]) -> None:
    first_role, first = named[0]
    for role, t in named[1:]:
        if t.shape[0] != first.shape[0]:
            raise fail("partition-mismatch", f"{op}: '{role}' {t.describe()} has "
                                             f"{t.shape[0]} partitions but '{first_role}' "
                                             f"{first.describe()} has {first.shape[0]}")


def same_elements(op: str, *named: tuple[str, Stored]) -> None:
    """Equal partitions and equal elements per partition (shapes may differ otherwise)."""
    same_partitions(op, *named)
    first_role, first = named[0]
    for role, t in named[1:]:
        if t.size != first.size:
            raise fail("shape-mismatch", f"{op}: '{role}' {t.describe()} has {free_size(t)} "
                                         f"elements per partition but '{first_role}' "
                                         f"{first.describe()} has {free_size(first)}")


def read(t: Stored, compute: np.dtype[Any] = F32) -> Arr:
    """The operand's values in the compute dtype (no copy when already fp32)."""
    h = handle(t)
    if h.alloc.pending:
        settle(h.alloc)
    if h.alloc.unfilled is not None:
        fill_pending(h.alloc)
    if h.alloc.region is MemoryRegion.shared_hbm:
        _shared_access(h, False, t)
    st = h.state
    if st is not None and not h.readonly:
        # Reading matmul results out of PSUM ends that accumulation group.
        st[st == PSUM_MATMUL] = PSUM_DRAINED
    arr = h.arr
    if arr.dtype == compute:
        return arr
    return arr.astype(compute)


def read_native(t: Stored) -> Arr:
    """The operand's values in its storage dtype."""
    return read(t, handle(t).arr.dtype)


def storage_dtype(t: Stored) -> np.dtype[Any]:
    """The NumPy dtype the values are stored in (tfloat32 is stored as float32)."""
    dt: np.dtype[Any] = handle(t).arr.dtype
    return dt


def settled(t: Stored) -> Arr:
    """The tensor's values with pending matmuls run, without ending a PSUM group."""
    h = handle(t)
    settle(h.alloc)
    fill_pending(h.alloc)
    if h.alloc.region is MemoryRegion.shared_hbm:
        _shared_access(h, False, t)
    return h.arr


def storage_of(t: Stored) -> Handle:
    """The tensor's storage handle (for instructions that keep PSUM state themselves)."""
    return handle(t)


def compute_dtype(*ts: Any) -> np.dtype[Any]:
    """fp32, or int64 when every tensor operand is an integer type (GpSimd integer math)."""
    tiles = [t for t in ts if isinstance(t, Stored)]
    if tiles and all(not dtypes.is_float(t.dtype) for t in tiles):
        return np.dtype(np.int64)
    return F32


def write(dst: Stored, value: Any, op: str) -> None:
    """Round `value` on write into `dst`, marking PSUM as written by a non-matmul engine."""
    h = handle(dst)
    if h.readonly:
        raise fail("read-only", f"{op}: cannot write into broadcast view {dst.describe()}")
    alloc = h.alloc
    after = _shared_access(h, True, dst) if alloc.region is MemoryRegion.shared_hbm else None
    alloc.written = True
    if alloc.pending:
        settle(alloc)
    if alloc.pinned_by:
        unpin(alloc)
    if alloc.unfilled is not None:
        first_write(h)
    arr = h.arr
    if isinstance(value, np.ndarray) and value.shape != arr.shape:
        value = value.reshape(arr.shape)
    dtypes.write(arr, value, dst.dtype)
    if type(h) is not Handle:  # an indirect (scatter) view writes through to storage
        scatter(h)
    if h.state is not None:
        h.state[...] = PSUM_OTHER
    if after is not None:
        after()


def _shared_access(h: Handle, is_write: bool, t: Stored) -> Callable[[], None] | None:
    """Under LNC=2, a shared-HBM access no core_barrier orders raises (`races.py`)."""
    st = current()
    if st.cores is None:
        return None
    after: Callable[[], None] | None = st.cores.access(st.program, h, is_write, t.describe())
    return after


def count(engine: str, elements: int) -> None:
    current().count(engine, elements)


def scalar_operand(v: Any, data: Stored, op: str, role: str) -> Any:
    """A compile-time scalar, or a [P,1] tile broadcast along the free dims of `data`."""
    if isinstance(v, Stored):
        on_chip(v, op, role)
        if v.shape[0] != data.shape[0] or free_size(v) != 1:
            raise fail("broadcast", f"{op}: '{role}' {v.describe()} must be a scalar or "
                                    f"[{data.shape[0]}, 1] tile for data {data.describe()}")
        col = read(v).reshape(v.shape[0], *([1] * (data.ndim - 1)))
        return col
    if isinstance(v, int | float | np.number | bool):
        return np.float32(v)
    raise fail("unsupported", f"{op}: '{role}' must be a scalar or a [P,1] tile, got {v!r}")


def assign(dst: Stored, value: Any) -> None:
    """`tile[...] = value`: an on-chip copy (or fill from a scalar) on the Vector engine.

    No traced `nki` function runs it, so it tells the cost recorder its operands itself
    (as the issue hook does for the others), so readers of `dst` wait for it.
    """
    rec = current().cost
    if rec is None or rec.depth:
        _assign(dst, value)
        return
    rec.begin("setitem", [value] if isinstance(value, Stored) else [], [dst])
    try:
        _assign(dst, value)
    finally:
        rec.depth -= 1
    rec.end([])


def _assign(dst: Stored, value: Any) -> None:
    on_chip(dst, "setitem", "dst")
    if isinstance(value, Stored):
        on_chip(value, "setitem", "value")
        if value.shape != dst.shape:
            same_elements("setitem", ("dst", dst), ("value", value))
        write(dst, read(value, compute_dtype(value)), "setitem")
    else:
        write(dst, np.float32(value) if dtypes.is_float(dst.dtype) else value, "setitem")
    count("vector", dst.size)


def dma(dst: Stored, src: Stored) -> None:
    """A DMA copy (HBM<->SBUF): same-dtype moves copy bits, others cast through fp32."""
    value = settled(src) if src.dtype == dst.dtype and not dtypes.is_tf32(dst.dtype) else \
        read(src)
    write(dst, value, "dma")
    st = current()
    st.count("dma", dst.size)
    st.counters.dma_bytes += dst.size * dst.dtype.itemsize


def reduce_axes(t: Stored, axis: Any, op: str) -> tuple[int, ...]:
    """Free axes only, and they must be the last contiguous ones."""
    raw = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    axes = tuple(sorted(int(a) % t.ndim for a in raw))
    if 0 in axes:
        raise fail("reduce-axis0", f"{op}: axis={axis!r} reduces the partition axis 0 of "
                                   f"{t.describe()}")
    if axes != tuple(range(t.ndim - len(axes), t.ndim)):
        raise fail("reduce-axis", f"{op}: axis={axis!r} of {t.describe()} is not the last "
                                  "contiguous free axes")
    return axes


# ---- generation rules (targets.py) -----------------------------------------------------
def target() -> str:
    """The generation the current launch runs for: trn1, trn2 or trn3."""
    return current().target


def rule(key: str) -> Any:
    """A targets.RULES fact for the current launch's generation."""
    return targets.rule(key, current().target)


def arch_refused(key: str, detail: str) -> Exception:
    """A feature the current generation lacks: arch-unsupported, citing the docs."""
    t = current().target
    return fail("arch-unsupported", f"{detail} on {t} ({targets.CORE[t]}); "
                                    f"{targets.cite(key)}")


def require(instruction: str) -> None:
    """Refuse an instruction the current generation does not have."""
    t = current().target
    if not targets.has_instruction(instruction, t):
        raise arch_refused(instruction, f"{instruction} is not available")
