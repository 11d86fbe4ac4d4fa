"""Storage: allocations, the handle a tensor keeps on them, and PSUM state and settling.

The bottom layer of the simulator (it imports only `dtypes`, `errors` and `state`). A `Handle` is
only data, as Triton's interpreter `TensorHandle` is: a NumPy view of an allocation, the
parallel PSUM element-state view, and a read-only flag. `Stored` is the base of
`NkiTensor`; it holds the handle in a slot whose name is removed from the class, so
kernel code has no attribute that reaches the backing array (hardware has none either);
the engines reach it through `handle()` here.

PSUM: every PSUM element records how it was last written (`PSUM_*`), which the matmul
accumulation rules read. A group of matmuls into one PSUM view is deferred and runs as
one GEMM when the result is needed (see `defer`): small BLAS calls are slow, and values
are the same as eager execution up to fp32 summation order, which hardware does not
promise either. This module owns settling: any read of that PSUM allocation, any other
write into it, an overlapping matmul, or a write into an SBUF tile a pending operand
still views (its "pin") settles the group first.
"""

from __future__ import annotations

import weakref
from enum import Enum
from typing import Any, cast

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.errors import fail
from nkibot.sim.state import MemoryTracker, current

Arr = np.ndarray[Any, Any]
_shares = cast(Any, np.shares_memory)  # its stubs only admit max_work -1 or 0

PMAX = 128
# PSUM element state: never written / written by a non-matmul instruction / by a matmul
# / by a matmul and since read out by another engine (the next group starts afresh).
PSUM_NEVER, PSUM_OTHER, PSUM_MATMUL, PSUM_DRAINED = 0, 1, 2, 3


class MemoryRegion(Enum):
    """Where a tensor lives."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


ON_CHIP = (MemoryRegion.sbuf, MemoryRegion.psum)


class Allocation:
    """Owns one allocation's storage; returns its bytes to the tracker when collected."""

    __slots__ = ("__weakref__", "base", "cost", "launch", "nbytes", "pending", "pinned_by",
                 "region", "state", "tracker", "unfilled", "written")

    def __init__(self, base: Arr, region: MemoryRegion, tracker: MemoryTracker | None,
                 nbytes: int, state: Arr | None = None, launch: int | None = None) -> None:
        self.base, self.region, self.tracker, self.nbytes = base, region, tracker, nbytes
        self.state = state
        #: The serial of the launch (RunState) that allocated it; None for a caller's array.
        self.launch = launch
        #: PSUM: matmul groups not yet computed; SBUF: PSUM allocations whose pending
        #: matmuls still view this storage.
        self.pending: list[Group] | None = None
        self.pinned_by: list[weakref.ref[Allocation]] | None = None
        #: Set by the first write (a kernel may return an output argument it wrote).
        self.written = False
        #: The sentinel (NaN, 4 or a `fill=` value) not yet written into `base`: a new
        #: tile is filled when something first observes it or writes part of it, and
        #: never when its first write covers it (`fill_pending`, `covers`).
        self.unfilled: Any = None
        #: The cost model's record of accesses to this allocation (its `_Tile`, with the
        #: recorder core it belongs to); None while no model recorded one.
        self.cost: Any = None

    def __del__(self) -> None:
        if self.tracker is not None:
            self.tracker.give(self.region.value, self.nbytes)


class Handle:
    """A view of an allocation: values, PSUM element states, read-only (broadcast) flag."""

    __slots__ = ("alloc", "arr", "cost", "readonly", "state")

    def __init__(self, arr: Arr, alloc: Allocation, state: Arr | None = None,
                 readonly: bool = False) -> None:
        self.arr, self.alloc, self.state, self.readonly = arr, alloc, state, readonly
        #: The cost model's cache of this view's geometry (its region and contiguous run:
        #: fixed for a view), filled on first use; None until then.
        self.cost: Any = None


class Stored:
    """What every tensor is to the engines: a shape, dtype, buffer and name over a handle."""

    __slots__ = ("__weakref__", "_handle", "buffer", "dtype", "name", "shape")

    def __init__(self, handle: Handle, dtype: np.dtype[Any], buffer: MemoryRegion,
                 name: str = "") -> None:
        _HANDLE.__set__(self, handle)
        self.shape: tuple[int, ...] = handle.arr.shape
        self.dtype = dtype
        self.buffer = buffer
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(handle(self).arr.size)

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP

    def describe(self) -> str:
        return f"{self.buffer.value}{list(self.shape)} {dtypes.name(self.dtype)}"


# The slot's descriptor, taken off the class: only this module can read or set it.
_HANDLE = Stored.__dict__["_handle"]
del Stored._handle  # type: ignore[attr-defined]
handle_of = _HANDLE.__get__


def handle(t: Stored) -> Handle:
    """The engines' access to a tensor's storage (kernels have none)."""
    h: Handle = handle_of(t)
    return h


# ---- PSUM accumulation groups ---------------------------------------------------------
class Group:
    """Matmuls into one PSUM view: the first overwrites (or adds), the rest add."""

    __slots__ = ("key", "overwrite", "pairs", "target")

    def __init__(self, target: Arr, overwrite: bool, key: tuple[Any, ...]) -> None:
        self.target = target
        self.overwrite = overwrite
        self.pairs: list[tuple[Arr, Arr]] = []
        self.key = key

    def run(self) -> None:
        if not current().numerics:
            return  # the cost model's cost-only mode: these values are never observed
        product = _diagonal_product(self.pairs)
        if product is None:
            product = _gemm(self.pairs)
        out = self.target
        try:
            flat = out if out.ndim == 2 else np.reshape(out, (out.shape[0], -1), copy=False)
        except ValueError:  # non-contiguous multi-dim view: combine on a copy, write back
            flat = out.reshape(out.shape[0], -1)
        if self.overwrite:
            np.copyto(flat, product)
        else:
            flat += product
        if not np.shares_memory(flat, out):
            np.copyto(out, flat.reshape(out.shape))


def _gemm(pairs: list[tuple[Arr, Arr]]) -> Arr:
    """sum(s.T @ m) over the group's matmuls."""
    if len(pairs) == 1:
        single: Arr = pairs[0][0].T @ pairs[0][1]
        return single
    # Row-major [M, K] and [K, N] operands: a plain GEMM, faster than a TN one.
    stationary_t = np.concatenate([s.T for s, _ in pairs], axis=1)
    moving = np.concatenate([m for _, m in pairs], axis=0)
    product: Arr = stationary_t @ moving
    return product


def _diagonal(stationary: Arr) -> Arr | None:
    """The diagonal of a square stationary with nothing off it (a depthwise convolution's
    per-channel weights, an identity), else None. NaN off the diagonal counts as something."""
    k, m = stationary.shape
    if k != m or (k > 1 and (stationary[0, 1] != 0 or stationary[1, 0] != 0)):
        return None  # the probe turns a dense stationary away before counting
    diag = np.diagonal(stationary)
    if np.count_nonzero(stationary) != np.count_nonzero(diag):
        return None
    return diag


def _diagonal_product(pairs: list[tuple[Arr, Arr]]) -> Arr | None:
    """sum(diag(s)[:, None] * m) when every stationary is diagonal: the GEMM's sums without
    its zero products, K times less arithmetic. None when a stationary is not diagonal, or
    when the result is not finite: a non-finite moving value shows there (d * inf is inf or
    NaN), and the GEMM would also spread 0 * inf = NaN to the other partitions, so that
    case takes the GEMM. Like the GEMM, the sums start from +0.0."""
    diags = []
    for stationary, moving in pairs:
        if stationary.dtype != np.float32 or moving.dtype != np.float32:
            return None
        diag = _diagonal(stationary)
        if diag is None:
            return None
        diags.append(diag)
    product = np.zeros((diags[0].shape[0], pairs[0][1].shape[1]), np.float32)
    term = np.empty_like(product)
    for diag, (_, moving) in zip(diags, pairs, strict=True):
        np.multiply(moving, diag[:, None], out=term)
        product += term
    return product if np.isfinite(product).all() else None


def _key(arr: Arr) -> tuple[Any, ...]:
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides)


def _overlaps(a: Arr, b: Arr) -> bool:
    try:
        return bool(_shares(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True


def pending_group(dst: Handle) -> Group | None:
    """The open group for exactly this view, if any.

    While it is open nothing else has touched the allocation (any other access settles
    it), so every element of the view is matmul-written: the next matmul simply adds.
    """
    groups = dst.alloc.pending
    if not groups:
        return None
    key = _key(dst.arr)
    return next((g for g in groups if g.key == key), None)


def defer(dst: Handle, stationary: Arr, moving: Arr, overwrite: bool,
          pins: list[Allocation]) -> None:
    """Queue `dst (+)= stationary.T @ moving` (operands already [K, free] fp32 arrays)."""
    alloc = dst.alloc
    if alloc.unfilled is not None:
        if overwrite:
            first_write(dst)
        else:
            fill_pending(alloc)
    groups: list[Group] = alloc.pending if alloc.pending is not None else []
    key = _key(dst.arr)
    group = next((g for g in groups if g.key == key), None)
    if group is None or overwrite:
        for g in [g for g in groups if g is group or _overlaps(g.target, dst.arr)]:
            g.run()
            groups.remove(g)
        group = Group(dst.arr, overwrite, key)
        groups.append(group)
    group.pairs.append((stationary, moving))
    alloc.pending = groups
    ref = weakref.ref(alloc)
    for pinned in pins:
        if pinned.pinned_by is None:
            pinned.pinned_by = [ref]
        elif pinned.pinned_by[-1] is not ref:
            pinned.pinned_by.append(ref)


def fill_pending(alloc: Allocation) -> None:
    """Write the allocation's sentinel now, if it is still pending (before any read of its
    values or a write of part of it)."""
    value = alloc.unfilled
    if value is not None:
        alloc.unfilled = None
        alloc.base.fill(value)


def covers(h: Handle) -> bool:
    """Whether a write through this view writes every byte of its allocation (a plain,
    writable view as large as the storage: reshapes, transposes and bitcasts of it)."""
    return (type(h) is Handle and not h.readonly and h.arr.nbytes == h.alloc.base.nbytes
            and 0 not in h.arr.strides)


def first_write(h: Handle) -> None:
    """Before writing through `h`: a write that covers a fresh allocation makes its
    sentinel unobservable (skipped); any other write fills it first."""
    if h.alloc.unfilled is not None:
        if covers(h):
            h.alloc.unfilled = None
        else:
            fill_pending(h.alloc)


def settle(alloc: Allocation) -> None:
    """Run every pending group of a PSUM allocation (before its values are observed)."""
    groups = alloc.pending
    if groups:
        alloc.pending = None
        for g in groups:
            g.run()


def unpin(alloc: Allocation) -> None:
    """Before writing into an SBUF tile, run the pending matmuls still viewing it."""
    refs = alloc.pinned_by
    alloc.pinned_by = None
    for ref in refs or ():
        target = ref()
        if target is not None:
            settle(target)


def values(t: Stored) -> Arr:
    """The tensor's settled values (a view; the simulator's own use only)."""
    h = handle(t)
    settle(h.alloc)
    fill_pending(h.alloc)
    return h.arr


def new_allocation(arr: Arr, region: MemoryRegion, tracker: MemoryTracker | None = None,
                   nbytes: int = 0, state: Arr | None = None,
                   launch: int | None = None) -> Handle:
    """A handle on a fresh allocation over `arr` (its own storage or a caller's array)."""
    if region in ON_CHIP and arr.shape and arr.shape[0] > PMAX:
        raise fail("partition-dim", f"{region.value} storage {list(arr.shape)} has partition "
                                    "dim over 128")
    return Handle(arr, Allocation(arr, region, tracker, nbytes, state, launch), state)
