"""Selection, top-k and search instructions: select_reduce, range_select, max8, topk,
nc_find_index8, nc_match_replace8, nonzero_with_count, sequence_bounds.

Semantics follow the nki.isa docstrings (their NumPy-equivalent blocks); values are
compared in fp32 and rounded on write, like every engine instruction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.engines import (
    count,
    free_size,
    on_chip,
    read,
    read_native,
    require,
    same_elements,
    scalar_operand,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa import accum
from nkibot.sim.isa.enums import reduce_cmd as _cmd
from nkibot.sim.language.math import make_binary
from nkibot.sim.tensor import MemoryRegion, NkiTensor

Arr = np.ndarray[Any, Any]
_maximum = make_binary("maximum")
# The docstring lists int8/uint8/int16/uint16; nki/test/test_nki_isa_select_reduce.py also
# passes a bool predicate.
_PRED_DTYPES = (dtypes.bool_, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                dtypes.uint32)


def _flat(t: NkiTensor, compute: Any = np.float32) -> Arr:
    return read(t, np.dtype(compute)).reshape(t.shape[0], free_size(t))


def select_reduce(dst: NkiTensor, predicate: NkiTensor, on_true: NkiTensor, on_false: Any,
                  reduce_res: NkiTensor | None = None, reduce_cmd: Any = _cmd.idle,
                  reduce_op: Any = _maximum, reverse_pred: bool = False,
                  name: Any = None) -> None:
    """dst = where(predicate, on_true, on_false), optionally max-reduced per partition."""
    opname = "select_reduce"
    dst, predicate = on_chip(dst, opname, "dst"), on_chip(predicate, opname, "predicate")
    on_true = on_chip(on_true, opname, "on_true")
    same_elements(opname, ("dst", dst), ("predicate", predicate), ("on_true", on_true))
    if predicate.buffer is MemoryRegion.psum and on_true.buffer is MemoryRegion.psum:
        raise fail("buffer-illegal", f"{opname}: on_true and predicate cannot both be in PSUM")
    if predicate.dtype not in _PRED_DTYPES:
        raise fail("dtype-illegal", f"{opname}: predicate {predicate.describe()} must be an "
                                    "integer type")
    if on_true.dtype in (dtypes.int32, dtypes.uint32) or dtypes.is_tf32(on_true.dtype):
        raise fail("dtype-illegal", f"{opname}: on_true {on_true.describe()} cannot be "
                                    "tfloat32, int32 or uint32")
    mask = (read(predicate, predicate.dtype).reshape(dst.shape) != 0) != reverse_pred
    other = scalar_operand(on_false, on_true, opname, "on_false")
    y = np.where(mask, read(on_true).reshape(dst.shape), other)
    write(dst, y, opname)
    count("vector", dst.size)
    _max_reduce(opname, y, reduce_op, reduce_res, reduce_cmd)


def _max_reduce(opname: str, y: Arr, reduce_op: Any, reduce_res: NkiTensor | None,
                cmd: Any) -> None:
    if reduce_op is not None:
        accum.reduce_op_name(reduce_op, ("maximum",), opname)
    parts = y.shape[0]
    if cmd is not _cmd.idle:
        lanes = accum.accumulate("vector", y, "maximum", cmd)
    else:
        lanes = accum.registers("vector")[:parts]
    if reduce_res is not None and not dtypes.is_float(reduce_res.dtype):
        raise fail("dtype-illegal", f"{opname}: reduce_res {reduce_res.describe()} must be a "
                                    "float type")
    accum.write_result(reduce_res, lanes, parts, opname)


_CMP = ("equal", "less", "less_equal", "greater", "greater_equal")
FP32_MIN = float(np.finfo(np.float32).min)


def range_select(dst: NkiTensor, on_true_tile: NkiTensor, comp_op0: Any, comp_op1: Any,
                 bound0: NkiTensor, bound1: NkiTensor, reduce_cmd: Any = _cmd.reset_reduce,
                 reduce_res: NkiTensor | None = None, reduce_op: Any = _maximum,
                 range_start: int = 0, on_false_value: Any = ...,
                 name: Any = None) -> None:
    """Keep elements whose free index + range_start passes both bound comparisons."""
    opname = "range_select"
    require("range_select")
    dst, src = on_chip(dst, opname, "dst"), on_chip(on_true_tile, opname, "on_true_tile")
    same_elements(opname, ("dst", dst), ("on_true_tile", src))
    if not dtypes.is_float(src.dtype):
        raise fail("dtype-illegal", f"{opname}: on_true_tile {src.describe()} must be float")
    names = [ops.op_name(c, "comp_op") for c in (comp_op0, comp_op1)]
    if any(n not in _CMP for n in names):
        raise fail("op-illegal", f"{opname}: comparison operators must be one of "
                                 + ", ".join(_CMP))
    if on_false_value is ...:  # the stub's default: the only legal value
        on_false_value = FP32_MIN
    if on_false_value != FP32_MIN:
        raise fail("unsupported", f"{opname}: on_false_value must be FP32_MIN "
                                  "(-3.4028235e+38), a hardware constraint")
    parts, n = src.shape[0], free_size(src)
    idx = np.float32(range_start) + np.arange(n, dtype=np.float32)[None, :]
    b0 = scalar_operand(bound0, src, opname, "bound0").reshape(parts, 1)
    b1 = scalar_operand(bound1, src, opname, "bound1").reshape(parts, 1)
    mask = ops.binary(names[0])(idx, b0) & ops.binary(names[1])(idx, b1)
    y = np.where(mask, _flat(src), np.float32(on_false_value))
    write(dst, y, opname)
    count("vector", dst.size)
    _max_reduce(opname, y, reduce_op, reduce_res, reduce_cmd)


def _search_src(opname: str, t: NkiTensor) -> None:
    n = free_size(t)
    if not 8 <= n <= 16384:
        raise fail("shape-mismatch", f"{opname}: {t.describe()} has {n} elements per "
                                     "partition; it must have 8..16384")


def _eight(opname: str, role: str, t: NkiTensor, parts: int) -> None:
    if t.shape[0] != parts or free_size(t) != 8:
        raise fail("shape-mismatch", f"{opname}: {role} {t.describe()} must be [{parts}, 8]")


def max8(dst: NkiTensor, src: NkiTensor, name: Any = None) -> None:
    """The 8 largest values of each partition, descending."""
    dst, src = on_chip(dst, "max8", "dst"), on_chip(src, "max8", "src")
    _search_src("max8", src)
    _eight("max8", "dst", dst, src.shape[0])
    x = _flat(src)
    write(dst, -np.sort(-x, axis=1)[:, :8], "max8")
    count("vector", src.size)


def _sentinel(dt: np.dtype[Any]) -> int:
    return int(np.iinfo(dt).max) if dt.kind in "ui" else 0xFFFFFFFF


def nc_find_index8(dst: NkiTensor, data: NkiTensor, vals: NkiTensor, name: Any = None) -> None:
    """Index of the first occurrence of each of 8 values per partition (all-ones if none)."""
    op = "nc_find_index8"
    dst, data, vals = (on_chip(t, op, r) for t, r in ((dst, "dst"), (data, "data"),
                                                      (vals, "vals")))
    _search_src(op, data)
    _eight(op, "vals", vals, data.shape[0])
    _eight(op, "dst", dst, data.shape[0])
    if dst.dtype not in (dtypes.uint16, dtypes.uint32):
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must be uint16 or uint32")
    x, v = _flat(data), _flat(vals)
    out = np.full(v.shape, _sentinel(dst.dtype), np.int64)
    for p in range(x.shape[0]):
        used: set[int] = set()
        for j in range(8):
            hits = [int(i) for i in np.flatnonzero(x[p] == v[p, j]) if int(i) not in used]
            if hits:  # duplicate vals pair with successive matches, ascending
                out[p, j] = hits[0]
                used.add(hits[0])
    write(dst, out, op)
    count("vector", data.size)


def nc_match_replace8(dst: NkiTensor, data: NkiTensor, vals: NkiTensor, imm: float,
                      dst_idx: NkiTensor | None = None, name: Any = None) -> None:
    """Replace the first occurrence of each of 8 values with imm (vals walked 7..0)."""
    op = "nc_match_replace8"
    dst, data, vals = (on_chip(t, op, r) for t, r in ((dst, "dst"), (data, "data"),
                                                      (vals, "vals")))
    same_elements(op, ("dst", dst), ("data", data))
    _search_src(op, data)
    _eight(op, "vals", vals, data.shape[0])
    x, v = _flat(data).copy(), _flat(vals)
    idx = np.full(v.shape, 0xFFFFFFFF, np.int64)
    orig = x.copy()
    for p in range(x.shape[0]):
        used: set[int] = set()
        for j in range(7, -1, -1):
            hits = [int(i) for i in np.flatnonzero(orig[p] == v[p, j]) if int(i) not in used]
            if hits:
                idx[p, j] = hits[0]
                used.add(hits[0])
                x[p, hits[0]] = np.float32(imm)
    write(dst, x, op)
    count("vector", data.size)
    if dst_idx is not None:
        dst_idx = on_chip(dst_idx, op, "dst_idx")
        _eight(op, "dst_idx", dst_idx, data.shape[0])
        write(dst_idx, idx, op)


def topk(val_dst: NkiTensor, idx_dst: NkiTensor, src: NkiTensor, n: int,
         name: Any = None) -> None:
    """Top-K of each 16-partition snake (element e at partition e % 16, column e // 16).

    Every partition of a 16-partition group receives that group's K largest values in
    ascending order and their snake indices.
    """
    op = "topk"
    val_dst = on_chip(val_dst, op, "val_dst", allow_psum=False)
    idx_dst = on_chip(idx_dst, op, "idx_dst", allow_psum=False)
    src = on_chip(src, op, "src", allow_psum=False)
    parts, k = src.shape[0], free_size(val_dst)
    if src.dtype != dtypes.bfloat16 or val_dst.dtype != dtypes.bfloat16:
        raise fail("dtype-illegal", f"{op}: src and val_dst must be bfloat16")
    if idx_dst.dtype != dtypes.uint32:
        raise fail("dtype-illegal", f"{op}: idx_dst {idx_dst.describe()} must be uint32")
    if parts % 16 or not 8 <= n < 65536 or not 1 <= k <= n or free_size(src) * 16 < n:
        raise fail("shape-mismatch", f"{op}: need partitions % 16 == 0, 8 <= n < 65536, "
                                     f"1 <= K <= n, src free >= ceil(n/16); got src "
                                     f"{src.describe()}, n={n}, K={k}")
    same_elements(op, ("val_dst", val_dst), ("idx_dst", idx_dst))
    x = _flat(src)
    vals = np.empty((parts, k), np.float32)
    idx = np.empty((parts, k), np.int64)
    for g in range(0, parts, 16):
        snake = x[g:g + 16].T.reshape(-1)[:n]
        order = np.argsort(-snake, kind="stable")[:k][::-1]
        vals[g:g + 16] = snake[order]
        idx[g:g + 16] = order
    write(val_dst, vals, op)
    write(idx_dst, idx, op)
    count("gpsimd", src.size)


def nonzero_with_count(dst: NkiTensor, src: NkiTensor, index_offset: int = 0,
                       padding_val: int = -1, name: Any = None) -> None:
    """Per partition 0, 16, ..., 112: nonzero indices (+offset), padding, then the count."""
    op = "nonzero_with_count"
    require("nonzero_with_count")
    dst = on_chip(dst, op, "dst", allow_psum=False)
    src = on_chip(src, op, "src", allow_psum=False)
    if src.dtype not in (dtypes.float32, dtypes.int32) or dst.dtype != dtypes.int32:
        raise fail("dtype-illegal", f"{op}: src must be float32/int32 and dst int32")
    t = free_size(src)
    if dst.shape[0] != src.shape[0] or free_size(dst) != t + 1:
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} must be [{src.shape[0]}, "
                                     f"{t + 1}]")
    x = read_native(src).reshape(src.shape[0], t)
    out = read_native(dst).reshape(dst.shape[0], t + 1).astype(np.int64)
    for p in range(0, src.shape[0], 16):
        nz = np.flatnonzero(x[p]) + index_offset
        out[p, :] = padding_val
        out[p, :nz.size] = nz
        out[p, t] = nz.size
    write(dst, out, op)
    count("gpsimd", src.size)


def sequence_bounds(dst: NkiTensor, segment_ids: NkiTensor, name: Any = None) -> None:
    """[start, end] of each element's segment; padding (id 0) gets [n, -1]."""
    op = "sequence_bounds"
    dst = on_chip(dst, op, "dst", allow_psum=False)
    seg = on_chip(segment_ids, op, "segment_ids", allow_psum=False)
    for t in (dst, seg):
        if t.dtype not in (dtypes.float32, dtypes.int32):
            raise fail("dtype-illegal", f"{op}: {t.describe()} must be float32 or int32")
    n = free_size(seg)
    if seg.shape[0] != 1 or dst.shape[0] != 1 or free_size(dst) != 2 * n:
        raise fail("shape-mismatch", f"{op}: segment_ids must be [1, n] and dst [1, 2, n]; "
                                     f"got {seg.describe()} and {dst.describe()}")
    ids = read(seg).reshape(n)
    start = np.full(n, n, np.int64)
    end = np.full(n, -1, np.int64)
    i = 0
    while i < n:  # runs of equal nonzero ids are segments
        j = i + 1
        while j < n and ids[j] == ids[i]:
            j += 1
        if ids[i] != 0:
            start[i:j], end[i:j] = i, j
        i = j
    write(dst, np.stack([start, end]).reshape(dst.shape), op)
    count("gpsimd", seg.size)
