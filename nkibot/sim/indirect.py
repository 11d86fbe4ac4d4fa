"""Dynamic and indirect access: `.ap(scalar_offset=, vector_offset=)`, `select(dim, tensor)`,
`vector_select`, `.indirect(index)`; plus the pattern queries `offset` / `get_pattern()`.

Semantics from nki/deep-dives/nki-aps.rst. The simulator runs eagerly, so a runtime
index is simply read when the view is built (it is built inline, in the instruction
that consumes it). A scalar offset then gives an ordinary strided view. A vector offset
gives an `IndirectTensor`: a gathered copy plus the flat storage positions it came from,
so that writing into it (DMA scatter) lands in storage (see `scatter`).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.errors import fail
from nkibot.sim.psum import settle
from nkibot.sim.tensor import NkiTensor

if TYPE_CHECKING:
    from nkibot.sim.tensor import _Allocation

Arr = np.ndarray[Any, Any]


class IndirectTensor(NkiTensor):
    """A view whose elements sit at arbitrary storage positions (a gather or scatter)."""

    __slots__ = ("flat", "target", "valid")

    def __init__(self, arr: Arr, dtype: np.dtype[Any], owner: NkiTensor, target: Arr,
                 flat: Arr, valid: Arr) -> None:
        alloc: _Allocation = owner._alloc
        super().__init__(arr, dtype, owner.buffer, alloc, None, owner.name)
        self.target, self.flat, self.valid = target, flat, valid

    def require_valid(self, op: str) -> None:
        if not bool(self.valid.all()):
            bad = int((~self.valid).sum())
            raise fail("out-of-bounds", f"{op}: {bad} indirect index(es) fall outside "
                                        f"{self.describe()}'s storage (oob_mode.error); pass "
                                        "oob_mode=nisa.oob_mode.skip to skip them")


def scatter(dst: NkiTensor) -> None:
    """After a write into an indirect view, copy its valid elements back into storage."""
    if isinstance(dst, IndirectTensor):
        v = dst.valid
        dst.target[dst.flat[v]] = dst._arr[v]


def _flat_storage(t: NkiTensor, dt: np.dtype[Any]) -> Arr:
    base = t._alloc.base
    flat: Arr = base.reshape(-1)
    return flat.view(dt) if dt.itemsize != base.itemsize else flat


def view_offset(t: NkiTensor) -> int:
    """Element offset of the view's first element from the start of its storage."""
    base = t._alloc.base
    start = int(t._arr.__array_interface__["data"][0]) - int(
        base.__array_interface__["data"][0])
    return start // t._arr.itemsize


def get_pattern(t: NkiTensor) -> list[list[int]]:
    return [[int(s), int(n)] for s, n in zip(t.strides, t.shape, strict=True)]


def scalar_value(x: Any, what: str) -> int:
    """A runtime index: a VirtualRegister, a one-element on-chip tensor, or an int."""
    value = getattr(x, "register_value", None)
    if value is not None:
        return int(value())
    if isinstance(x, NkiTensor):
        if x.size != 1:
            raise fail("shape-mismatch", f"{what}: {x.describe()} must hold one element")
        settle(x._alloc)
        return int(np.asarray(x._arr).reshape(-1)[0])
    try:
        return operator.index(x)
    except TypeError:
        raise fail("unsupported", f"{what}: {x!r} is not a register, tensor or int") from None


def _index_vector(v: NkiTensor, count: int, what: str) -> Arr:
    if not isinstance(v, NkiTensor) or dtypes.is_float(v.dtype):
        raise fail("dtype-illegal", f"{what}: vector_offset must be an integer SBUF tensor")
    settle(v._alloc)
    idx = np.asarray(v._arr).astype(np.int64)
    flat = idx.reshape(idx.shape[0], -1).T.reshape(-1)  # column-major, as the DGE walks it
    if flat.size < count:
        raise fail("shape-mismatch", f"{what}: vector_offset {v.describe()} holds "
                                     f"{flat.size} indices; the pattern needs {count}")
    return flat[:count]


def dynamic_ap(t: NkiTensor, pattern: Any, offset: int | None, scalar_offset: Any,
               vector_offset: Any, indirect_dim: int, dtype: Any) -> NkiTensor:
    """`.ap()` with a runtime scalar offset (strided view) or vector offset (gather)."""
    from nkibot.sim.views import access_pattern

    if scalar_offset is not None and vector_offset is not None:
        raise fail("unsupported", ".ap: give scalar_offset or vector_offset, not both")
    base_shape = t._alloc.base.shape
    if not 0 <= indirect_dim < len(base_shape):
        raise fail("out-of-bounds", f".ap: indirect_dim {indirect_dim} outside "
                                    f"{list(base_shape)}")
    row = int(np.prod(base_shape[indirect_dim + 1:], dtype=np.int64))
    start = view_offset(t) if offset is None else int(offset)
    if scalar_offset is not None:
        value = scalar_value(scalar_offset, ".ap scalar_offset")
        return access_pattern(t, pattern, start + value * row, dtype)
    if indirect_dim != 0:
        raise fail("unsupported", ".ap: vector_offset supports indirect_dim=0 only (as NKI)")
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    idx = _index_vector(vector_offset, pairs[0][1], ".ap vector_offset")
    return _gather_view(t, start, row, idx, pairs[1:], dtype, base_shape[0])


def _gather_view(t: NkiTensor, start: int, row: int, idx: Arr, rest: list[tuple[int, int]],
                 dtype: Any, rows: int) -> IndirectTensor:
    dt = t.dtype if dtype is None else dtypes.normalize(dtype)
    target = _flat_storage(t, dt)
    inner = np.zeros([1] * (len(rest) + 1), np.int64)
    for i, (stride, n) in enumerate(rest):
        shape = [1] * (len(rest) + 1)
        shape[i + 1] = n
        inner = inner + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
    flat = start + (idx * row).reshape([-1] + [1] * len(rest)) + inner
    valid = np.broadcast_to(((idx >= 0) & (idx < rows)).reshape(
        [-1] + [1] * len(rest)), flat.shape) & (flat >= 0) & (flat < target.size)
    safe = np.where(valid, flat, 0)
    settle(t._alloc)
    return IndirectTensor(target[safe], dt, t, target, safe, np.array(valid))


def dynamic_select(t: NkiTensor, dim: int, index: NkiTensor) -> NkiTensor:
    """`select(dim, tensor)`: one slice at a runtime index, the dimension removed."""
    if t.on_chip and dim == 0:
        raise fail("view-illegal", "dynamic select on the partition dim of an on-chip tensor")
    value = scalar_value(index, "select")
    return t.select(dim, value)


def vector_select(t: NkiTensor, dim: int, vector_offset: NkiTensor) -> NkiTensor:
    """Partition p reads index vector_offset[p] of dim 0 (HBM tensors only)."""
    if dim != 0 or t.on_chip:
        raise fail("unsupported", "vector_select: dim must be 0 and the tensor in HBM")
    n = vector_offset.shape[0]
    idx = _index_vector(vector_offset, n, "vector_select")
    rest = [(int(s), int(c)) for s, c in zip(t.strides[1:], t.shape[1:], strict=True)]
    return _gather_view(t, view_offset(t), int(t.strides[0]), idx, rest, None, t.shape[0])


def indirect(t: NkiTensor, index: NkiTensor, num_elem: int | None = None) -> NkiTensor:
    """Tensor indirection: view[p, i] = t[p, offset_i], offset_i = index[i % 16, i // 16]."""
    if t.ndim != 2 or not t.on_chip:
        raise fail("unsupported", ".indirect: a 2-D on-chip tensor is simulated")
    settle(index._alloc)
    idx = np.asarray(index._arr).astype(np.int64).reshape(index.shape[0], -1)
    group = min(16, idx.shape[0])
    offs = idx[:group].T.reshape(-1)
    n = offs.size if num_elem is None else int(num_elem)
    offs = offs[:n]
    s0, s1 = t.strides
    flat = view_offset(t) + (np.arange(t.shape[0]) * s0)[:, None] + (offs * s1)[None, :]
    valid = np.broadcast_to(((offs >= 0) & (offs < t.shape[1]))[None, :], flat.shape)
    target = _flat_storage(t, t.dtype)
    safe = np.where(valid, flat, 0)
    return IndirectTensor(target[safe], t.dtype, t, target, safe, np.array(valid))


def rearrange(t: NkiTensor, src_pattern: Any, dst_pattern: Any,
              fixed_sizes: dict[str, int] | None = None) -> NkiTensor:
    """einops-style split / reorder / merge of dimensions, as views."""
    sizes = dict(fixed_sizes or {})
    if len(src_pattern) != t.ndim:
        raise fail("view-illegal", f"rearrange: {src_pattern} names {len(src_pattern)} dims "
                                   f"of {t.describe()}")
    names: list[str] = []
    split: list[int] = []
    for dim, part in enumerate(src_pattern):
        group = list(part) if isinstance(part, tuple | list) else [part]
        known = int(np.prod([sizes[g] for g in group if g in sizes], dtype=np.int64))
        unknown = [g for g in group if g not in sizes]
        if len(unknown) > 1:
            raise fail("view-illegal", f"rearrange: give fixed_sizes for {unknown[1:]}")
        for g in unknown:
            sizes[g] = t.shape[dim] // known
        names += group
        split += [sizes[g] for g in group]
    out = t.reshape(tuple(split))
    flat_dst = [g for part in dst_pattern
                for g in (part if isinstance(part, tuple | list) else [part])]
    out = out.permute(tuple(names.index(g) for g in flat_dst))
    merged = [int(np.prod([sizes[g] for g in part], dtype=np.int64))
              if isinstance(part, tuple | list) else sizes[part] for part in dst_pattern]
    return out if tuple(merged) == out.shape else out.reshape(tuple(merged))
