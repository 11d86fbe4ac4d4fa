"""Gathers, shuffles and DMA compute: local_gather, nc_n_gather, nc_stream_shuffle,
dma_transpose, dma_compute (semantics from their nki.isa docstrings)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.engines import (
    count,
    free_size,
    in_buffer,
    on_chip,
    read,
    read_native,
    same_elements,
    tensor,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.indirect import indirection
from nkibot.sim.isa.enums import dge_mode as _dge
from nkibot.sim.isa.enums import oob_mode as _oob
from nkibot.sim.state import current
from nkibot.sim.tensor import MemoryRegion, NkiTensor

Arr = np.ndarray[Any, Any]
_DMA_OK = (MemoryRegion.sbuf, MemoryRegion.private_hbm, MemoryRegion.shared_hbm)


def local_gather(dst: NkiTensor, src_buffer: NkiTensor, index: NkiTensor,
                 num_elem_per_idx: int = 1, num_valid_indices: int | None = None,
                 name: Any = None) -> None:
    """Each 16-partition group gathers partitions of its src slice by flattened index."""
    op = "local_gather"
    dst = on_chip(dst, op, "dst", allow_psum=False)
    src = on_chip(src_buffer, op, "src_buffer", allow_psum=False)
    index = on_chip(index, op, "index", allow_psum=False)
    parts = src.shape[0]
    if index.shape[0] != parts or parts % 16:
        raise fail("shape-mismatch", f"{op}: src_buffer {src.describe()} and index "
                                     f"{index.describe()} need equal partitions, a multiple of 16")
    if num_elem_per_idx not in (1, 2, 4, 8, 16, 32):
        raise fail("shape-mismatch", f"{op}: num_elem_per_idx {num_elem_per_idx} must be one of "
                                     "1, 2, 4, 8, 16, 32")
    if index.dtype != dtypes.uint16:
        raise fail("dtype-illegal", f"{op}: index {index.describe()} must be uint16")
    if dst.dtype != src.dtype:
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must keep src's dtype")
    groups = parts // 16
    per_core = free_size(index) * 16
    valid = per_core if num_valid_indices is None else int(num_valid_indices)
    if valid > per_core or valid > 4096:
        raise fail("shape-mismatch", f"{op}: {valid} indices per core (at most {per_core} "
                                     "and 4096)")
    x = read_native(src).reshape(parts, free_size(src))
    idx = read_native(index).reshape(parts, -1).astype(np.int64)
    # Per 16-partition core: indices flattened partition-first (column-major) are element
    # offsets into each partition's flattened free dim (the docstring's NumPy reference).
    span = np.arange(num_elem_per_idx, dtype=np.int64)
    out = np.empty((parts, valid * num_elem_per_idx), x.dtype)
    for g in range(groups):
        ids = idx[16 * g:16 * g + 16].T.reshape(-1)[:valid]
        cols = (ids[:, None] + span[None, :]).reshape(-1)
        if cols.size and cols.max() >= x.shape[1]:
            raise fail("out-of-bounds", f"{op}: index {int(cols.max())} past the "
                                        f"{x.shape[1]} elements per partition")
        out[16 * g:16 * g + 16] = x[16 * g:16 * g + 16][:, cols]
    flat = out
    total = free_size(dst) * dst.shape[0]
    if flat.size != total:
        raise fail("shape-mismatch", f"{op}: gathered {flat.size} elements but dst "
                                     f"{dst.describe()} holds {total}")
    write(dst, flat.reshape(dst.shape), op)
    count("gpsimd", dst.size)


def nc_n_gather(dst: NkiTensor, data: NkiTensor, indices: NkiTensor, name: Any = None) -> None:
    """dst[p, j] = flat(data[p])[indices[p, j]] within each partition (GpSimd)."""
    op = "nc_n_gather"
    dst, data, indices = (on_chip(t, op, r, allow_psum=False) for t, r in
                          ((dst, "dst"), (data, "data"), (indices, "indices")))
    same_elements(op, ("dst", dst), ("indices", indices))
    if data.shape[0] != dst.shape[0]:
        raise fail("partition-mismatch", f"{op}: data {data.describe()} and dst "
                                         f"{dst.describe()} need equal partitions")
    if indices.dtype != dtypes.uint32 or dst.dtype != data.dtype:
        raise fail("dtype-illegal", f"{op}: indices must be uint32 and dst keep data's dtype")
    n = free_size(data)
    x = read_native(data).reshape(data.shape[0], n)
    idx = read_native(indices).reshape(indices.shape[0], -1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise fail("out-of-bounds", f"{op}: indices must lie in [0, {n})")
    write(dst, np.take_along_axis(x, idx, axis=1).reshape(dst.shape), op)
    count("gpsimd", dst.size)


def nc_stream_shuffle(dst: NkiTensor, src: NkiTensor, shuffle_mask: Any,
                      name: Any = None) -> None:
    """Within each 32-partition quadrant, dst partition i copies src partition mask[i]."""
    op = "nc_stream_shuffle"
    dst, src = on_chip(dst, op, "dst"), on_chip(src, op, "src")
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        raise fail("shape-mismatch", f"{op}: shuffle_mask must be 32 entries in 0..31 or 255")
    if dst.dtype != src.dtype or free_size(dst) != free_size(src):
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} and src {src.describe()} "
                                     "need one dtype and equal elements per partition")
    x = read_native(src).reshape(src.shape[0], -1)
    out = read_native(dst).reshape(dst.shape[0], -1).copy()
    for p in range(dst.shape[0]):
        m = mask[p % 32]
        q = (p // 32) * 32 + m
        if m != 255 and q < x.shape[0]:
            out[p] = x[q]
    write(dst, out.reshape(dst.shape), op)
    count("vector", dst.size)


_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst: NkiTensor, src: NkiTensor, axes: Any = None, priority: Any = None,
                  dge_mode: Any = _dge.unknown, oob_mode: Any = _oob.error,
                  name: Any = None) -> None:
    """dst = src transposed by DMA: axes (1, 0), (2, 1, 0) or (3, 1, 2, 0)."""
    op = "dma_transpose"
    dst, src = tensor(dst, op, "dst"), tensor(src, op, "src")
    in_buffer(dst, op, "dst", MemoryRegion.sbuf)
    in_buffer(src, op, "src", *_DMA_OK)
    default = _TRANSPOSE_AXES.get(src.ndim)
    order = default if axes is None else tuple(int(a) for a in axes)
    if order is None or order != default:
        raise fail("unsupported", f"{op}: axes {axes} for a {src.ndim}-d src; supported are "
                                  "(1, 0), (2, 1, 0) and (3, 1, 2, 0)")
    if src.dtype != dst.dtype:
        raise fail("dtype-illegal", f"{op}: src {src.describe()} and dst {dst.describe()} "
                                    "must share a dtype")
    value = read_native(src)
    ind = indirection(src)
    if ind is not None and oob_mode is not _oob.skip:
        ind.require_valid(op, src.describe())
    moved = np.transpose(value, order)
    if moved.shape != dst.shape:
        raise fail("shape-mismatch", f"{op}: transposed src is {list(moved.shape)} but dst is "
                                     f"{dst.describe()}")
    if ind is not None:
        keep = np.transpose(ind.valid, order)
        moved = np.where(keep, moved, read_native(dst))
    write(dst, moved, op)
    _count_dma(dst)


def _count_dma(dst: NkiTensor) -> None:
    st = current()
    st.count("dma", dst.size)
    st.counters.dma_bytes += dst.size * dst.dtype.itemsize


def dma_compute(dst: NkiTensor, srcs: Any, reduce_op: Any, scales: Any = None,
                unique_indices: bool = True, oob_mode: Any = _oob.error,
                name: Any = None) -> None:
    """dst = srcs[0] + srcs[1] + ... in the DMA engines (fp32 inside), incl. scatter/gather RMW."""
    op = "dma_compute"
    dst = tensor(dst, op, "dst")
    in_buffer(dst, op, "dst", *_DMA_OK)
    tiles = [tensor(s, op, f"srcs[{i}]") for i, s in enumerate(srcs)]
    if not 1 <= len(tiles) <= 16:
        raise fail("shape-mismatch", f"{op}: 1..16 source tensors, got {len(tiles)}")
    if ops.op_name(reduce_op, "reduce_op") != "add":
        raise fail("op-illegal", f"{op}: only nl.add is supported as reduce_op")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise fail("unsupported", f"{op}: every scale must be 1.0 (a documented limitation)")
    if not unique_indices:
        raise fail("unsupported", f"{op}: unique_indices=False is not supported (as in NKI)")
    for i, t in enumerate(tiles):
        in_buffer(t, op, f"srcs[{i}]", *_DMA_OK)
        if t.size != dst.size:
            raise fail("shape-mismatch", f"{op}: srcs[{i}] {t.describe()} and dst "
                                         f"{dst.describe()} hold different element counts")
    valid = np.ones(dst.shape, bool)
    for t in (dst, *tiles):
        ind = indirection(t)
        if ind is not None:
            if oob_mode is not _oob.skip:
                ind.require_valid(op, t.describe())
            valid &= ind.valid.reshape(dst.shape)
    total = sum((read(t).reshape(dst.shape) for t in tiles), np.zeros(dst.shape, np.float32))
    write(dst, np.where(valid, total, read(dst)) if not valid.all() else total, op)
    _count_dma(dst)
