"""Deferred PSUM accumulation: a group of matmuls into one PSUM region runs as one GEMM.

A tiled matmul issues many small `nc_matmul`s (K tiles of 128) into the same PSUM tile.
Small BLAS calls are slow (thread start-up per call), so we record each group's operands
and compute `concat(stationary).T @ concat(moving)` once, when the result is needed:
any read of that PSUM allocation, any other write into it, an overlapping matmul, or a
write into an SBUF tile a pending operand still views (its "pin"). Values are the same
as eager execution up to fp32 summation order, which hardware does not promise either.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from nkibot.sim.state import current

if TYPE_CHECKING:
    from nkibot.sim.tensor import NkiTensor, _Allocation

Arr = np.ndarray[Any, Any]
_shares = cast(Any, np.shares_memory)  # its stubs only admit max_work -1 or 0


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
        if len(self.pairs) == 1:
            product = self.pairs[0][0].T @ self.pairs[0][1]
        else:
            # Row-major [M, K] and [K, N] operands: a plain GEMM, faster than a TN one.
            stationary_t = np.concatenate([s.T for s, _ in self.pairs], axis=1)
            moving = np.concatenate([m for _, m in self.pairs], axis=0)
            product = stationary_t @ moving
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


def _key(arr: Arr) -> tuple[Any, ...]:
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides)


def _overlaps(a: Arr, b: Arr) -> bool:
    try:
        return bool(_shares(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True


def pending_group(dst: NkiTensor) -> Group | None:
    """The open group for exactly this view, if any.

    While it is open nothing else has touched the allocation (any other access settles
    it), so every element of the view is matmul-written: the next matmul simply adds.
    """
    groups = dst._alloc.pending
    if not groups:
        return None
    key = _key(dst._arr)
    return next((g for g in groups if g.key == key), None)


def defer(dst: NkiTensor, stationary: Arr, moving: Arr, overwrite: bool,
          pins: list[_Allocation]) -> None:
    """Queue `dst (+)= stationary.T @ moving` (operands already [K, free] fp32 arrays)."""
    alloc = dst._alloc
    groups: list[Group] = alloc.pending if alloc.pending is not None else []
    key = _key(dst._arr)
    group = next((g for g in groups if g.key == key), None)
    if group is None or overwrite:
        for g in [g for g in groups if g is group or _overlaps(g.target, dst._arr)]:
            g.run()
            groups.remove(g)
        group = Group(dst._arr, overwrite, key)
        groups.append(group)
    group.pairs.append((stationary, moving))
    alloc.pending = groups
    ref = weakref.ref(alloc)
    for pinned in pins:
        if pinned.pinned_by is None:
            pinned.pinned_by = [ref]
        elif pinned.pinned_by[-1] is not ref:
            pinned.pinned_by.append(ref)


def settle(alloc: _Allocation) -> None:
    """Run every pending group of a PSUM allocation (before its values are observed)."""
    groups = alloc.pending
    if groups:
        alloc.pending = None
        for g in groups:
            g.run()


def unpin(alloc: _Allocation) -> None:
    """Before writing into an SBUF tile, run the pending matmuls still viewing it."""
    refs = alloc.pinned_by
    alloc.pinned_by = None
    for ref in refs or ():
        target = ref()
        if target is not None:
            settle(target)
