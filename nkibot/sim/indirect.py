"""Dynamic and indirect access: `.ap(scalar_offset=, vector_offset=)`, `select(dim, tensor)`,
`vector_select`, `.indirect(index)`; plus the pattern queries `offset` / `get_pattern()`.

Semantics from nki/deep-dives/nki-aps.rst. The simulator runs eagerly, so a runtime
index is simply read when the view is built (it is built inline, in the instruction
that consumes it). A scalar offset then gives an ordinary strided view. A vector offset
gives an `IndirectHandle`: a gathered copy plus the flat storage positions it came from,
so that writing into it (DMA scatter) lands in storage (see `scatter`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.errors import fail
from nkibot.sim.storage import Handle, Stored, handle, values
from nkibot.sim.views import access_pattern

Arr = np.ndarray[Any, Any]
#: A view built by this module: the values (and PSUM states) the tensor gets.
Built = tuple[Handle, np.dtype[Any]]


class IndirectHandle(Handle):
    """A handle whose elements sit at arbitrary storage positions (a gather or scatter):
    a gathered copy, the flat positions it came from, and which of them are in bounds."""

    __slots__ = ("flat", "target", "valid")

    def __init__(self, arr: Arr, owner: Handle, target: Arr, flat: Arr, valid: Arr) -> None:
        super().__init__(arr, owner.alloc, None, owner.readonly)
        self.target, self.flat, self.valid = target, flat, valid

    def require_valid(self, op: str, what: str) -> None:
        if not bool(self.valid.all()):
            bad = int((~self.valid).sum())
            raise fail("out-of-bounds", f"{op}: {bad} indirect index(es) fall outside "
                                        f"{what}'s storage (oob_mode.error); pass "
                                        "oob_mode=nisa.oob_mode.skip to skip them")


def indirection(t: Stored) -> IndirectHandle | None:
    h = handle(t)
    return h if isinstance(h, IndirectHandle) else None


def scatter(h: Handle) -> None:
    """After a write into an indirect view, copy its valid elements back into storage."""
    if isinstance(h, IndirectHandle):
        v = h.valid
        h.target[h.flat[v]] = h.arr[v]


def _flat_storage(h: Handle, dt: np.dtype[Any]) -> Arr:
    base = h.alloc.base
    flat: Arr = base.reshape(-1)
    return flat.view(dt) if dt.itemsize != base.itemsize else flat


def view_offset(t: Stored) -> int:
    """Element offset of the view's first element from the start of its storage."""
    h = handle(t)
    start = int(h.arr.__array_interface__["data"][0]) - int(
        h.alloc.base.__array_interface__["data"][0])
    return start // h.arr.itemsize


def strides(t: Stored) -> list[int]:
    arr = handle(t).arr
    return [s // arr.itemsize for s in arr.strides]


def scalar_value(x: Any, what: str) -> int:
    """A runtime index: a VirtualRegister, a one-element on-chip tensor, or an int."""
    value = getattr(x, "register_value", None)
    if value is not None:
        return int(value())
    if isinstance(x, Stored):
        if x.size != 1:
            raise fail("shape-mismatch", f"{what}: {x.describe()} must hold one element")
        return int(np.asarray(values(x)).reshape(-1)[0])
    try:
        return operator.index(x)
    except TypeError:
        raise fail("unsupported", f"{what}: {x!r} is not a register, tensor or int") from None


def _index_vector(v: Any, count: int, what: str) -> Arr:
    if not isinstance(v, Stored) or dtypes.is_float(v.dtype):
        raise fail("dtype-illegal", f"{what}: vector_offset must be an integer SBUF tensor")
    idx = np.asarray(values(v)).astype(np.int64)
    flat = idx.reshape(idx.shape[0], -1).T.reshape(-1)  # column-major, as the DGE walks it
    if flat.size < count:
        raise fail("shape-mismatch", f"{what}: vector_offset {v.describe()} holds "
                                     f"{flat.size} indices; the pattern needs {count}")
    return flat[:count]


def dynamic_ap(t: Stored, pattern: Any, offset: int | None, scalar_offset: Any,
               vector_offset: Any, indirect_dim: int, dt: np.dtype[Any]) -> Handle:
    """`.ap()` with a runtime scalar offset (strided view) or vector offset (gather)."""
    if scalar_offset is not None and vector_offset is not None:
        raise fail("unsupported", ".ap: give scalar_offset or vector_offset, not both")
    h = handle(t)
    if not 0 <= indirect_dim < t.ndim:
        raise fail("out-of-bounds", f".ap: indirect_dim {indirect_dim} outside {t.describe()}")
    # "indirect_dim: dimension in self.shape whose stride scales the indirect offset"
    row = strides(t)[indirect_dim]
    # `offset` composes with the view's own storage offset (the NkiTensor.ap docstring).
    start = view_offset(t) + (offset or 0)
    if scalar_offset is not None:
        value = scalar_value(scalar_offset, ".ap scalar_offset")
        arr, state = access_pattern(h, t.on_chip, t.describe(), pattern, start + value * row,
                                    dt)
        return Handle(arr, h.alloc, state, h.readonly)
    if indirect_dim != 0:
        raise fail("unsupported", ".ap: vector_offset supports indirect_dim=0 only (as NKI)")
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    idx = _index_vector(vector_offset, pairs[0][1], ".ap vector_offset")
    return _gather(t, start, row, idx, pairs[1:], dt, t.shape[0])


def _gather(t: Stored, start: int, row: int, idx: Arr, rest: list[tuple[int, int]],
            dt: np.dtype[Any], rows: int) -> IndirectHandle:
    h = handle(t)
    target = _flat_storage(h, dt)
    inner = np.zeros([1] * (len(rest) + 1), np.int64)
    for i, (stride, n) in enumerate(rest):
        shape = [1] * (len(rest) + 1)
        shape[i + 1] = n
        inner = inner + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
    flat = start + (idx * row).reshape([-1] + [1] * len(rest)) + inner
    valid = np.broadcast_to(((idx >= 0) & (idx < rows)).reshape(
        [-1] + [1] * len(rest)), flat.shape) & (flat >= 0) & (flat < target.size)
    safe = np.where(valid, flat, 0)
    values(t)  # settle pending matmuls before copying
    return IndirectHandle(target[safe], h, target, safe, np.array(valid))


def vector_select(t: Stored, dim: int, vector_offset: Any) -> IndirectHandle:
    """Partition p reads index vector_offset[p] of dim 0 (HBM tensors only)."""
    if dim != 0 or t.on_chip:
        raise fail("unsupported", "vector_select: dim must be 0 and the tensor in HBM")
    n = vector_offset.shape[0]
    idx = _index_vector(vector_offset, n, "vector_select")
    st = strides(t)
    rest = [(int(s), int(c)) for s, c in zip(st[1:], t.shape[1:], strict=True)]
    return _gather(t, view_offset(t), int(st[0]), idx, rest, t.dtype, t.shape[0])


def indirect(t: Stored, index: Any, num_elem: int | None = None) -> IndirectHandle:
    """Tensor indirection: view[p, i] = t[p, offset_i], offset_i = index[i % 16, i // 16]."""
    if t.ndim != 2 or not t.on_chip or not isinstance(index, Stored):
        raise fail("unsupported", ".indirect: a 2-D on-chip tensor and an index tile are "
                                  "simulated")
    idx = np.asarray(values(index)).astype(np.int64).reshape(index.shape[0], -1)
    group = min(16, idx.shape[0])
    offs = idx[:group].T.reshape(-1)
    offs = offs[:offs.size if num_elem is None else int(num_elem)]
    s0, s1 = strides(t)
    flat = view_offset(t) + (np.arange(t.shape[0]) * s0)[:, None] + (offs * s1)[None, :]
    valid = np.broadcast_to(((offs >= 0) & (offs < t.shape[1]))[None, :], flat.shape)
    h = handle(t)
    target = _flat_storage(h, t.dtype)
    safe = np.where(valid, flat, 0)
    values(t)
    return IndirectHandle(target[safe], h, target, safe, np.array(valid))


def rearrange_plan(shape: tuple[int, ...], src_pattern: Any, dst_pattern: Any,
                   fixed_sizes: dict[str, int] | None) -> tuple[tuple[int, ...],
                                                                 tuple[int, ...],
                                                                 tuple[int, ...]]:
    """einops-style: (split shape, permutation, merged shape) for `t.rearrange`."""
    sizes = dict(fixed_sizes or {})
    if len(src_pattern) != len(shape):
        raise fail("view-illegal", f"rearrange: {src_pattern} names {len(src_pattern)} dims "
                                   f"of a {len(shape)}-d tensor")
    names: list[str] = []
    split: list[int] = []
    for dim, part in enumerate(src_pattern):
        group = list(part) if isinstance(part, tuple | list) else [part]
        known = int(np.prod([sizes[g] for g in group if g in sizes], dtype=np.int64))
        unknown = [g for g in group if g not in sizes]
        if len(unknown) > 1:
            raise fail("view-illegal", f"rearrange: give fixed_sizes for {unknown[1:]}")
        for g in unknown:
            sizes[g] = shape[dim] // known
        names += group
        split += [sizes[g] for g in group]
    flat_dst = [g for part in dst_pattern
                for g in (part if isinstance(part, tuple | list) else [part])]
    order = tuple(names.index(g) for g in flat_dst)
    merged = tuple(int(np.prod([sizes[g] for g in part], dtype=np.int64))
                   if isinstance(part, tuple | list) else sizes[part] for part in dst_pattern)
    return tuple(split), order, merged
