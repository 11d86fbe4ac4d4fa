"""MX (OCP microscaling) on NeuronCore-v4: quantize_mx and nc_matmul_mx.

A scaling group is 32 values: 8 partitions x 4 elements, i.e. one x4-packed word on each
of 8 consecutive partitions. A scale is a float8_e8m0fnu (or uint8) biased exponent:
factor = 2 ** (byte - 127). Scale tiles hold group g of partitions 8g..8g+7 either
contiguously ([P // 8, F4], when the data spans at most 32 partitions) or in the data's
quadrant ([P, F4], group g at partition 32 * (g // 4) + g % 4), as nki/deep-dives/
mxfp-matmul.rst lays out. Block scale (quantize_mx docstring):
X = 2 ** (floor(log2(amax)) - (E_max - 1)), E_max = 8 (e4m3fn) or 15 (e5m2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.engines import count, free_size, on_chip, read, read_native, require, write
from nkibot.sim.errors import fail
from nkibot.sim.isa.tensor import issue_matmul
from nkibot.sim.tensor import MemoryRegion, NkiTensor

Arr = np.ndarray[Any, Any]
_EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15, "float4_e2m1fn_x4": 2}
_FMAX = {"float8_e4m3fn_x4": 448.0, "float8_e5m2_x4": 57344.0, "float4_e2m1fn_x4": 6.0}


def _trn3(op: str) -> None:
    require(op)


def _mx(t: NkiTensor, op: str, role: str) -> str:
    name = dtypes.mx_name(t.dtype)
    if name is None:
        raise fail("dtype-illegal", f"{op}: {role} {t.describe()} must be float8_e5m2_x4, "
                                    "float8_e4m3fn_x4 or float4_e2m1fn_x4")
    return name


def _scale_bytes_dtype(t: NkiTensor, op: str, role: str) -> None:
    if t.dtype not in (dtypes.uint8, dtypes.float8_e8m0fnu):
        raise fail("dtype-illegal", f"{op}: {role} {t.describe()} must be float8_e8m0fnu "
                                    "or uint8")


def _group_rows(parts: int, scale_parts: int, op: str) -> Arr:
    """The scale tile partition of each 8-partition group of a `parts`-partition tile."""
    groups = parts // 8
    if scale_parts == groups or parts <= 32:
        if scale_parts < groups:
            raise fail("shape-mismatch", f"{op}: the scale tile needs {groups} partitions")
        return np.arange(groups)
    g = np.arange(groups)
    rows = np.asarray(32 * (g // 4) + g % 4)
    # The scale view may start at an offset inside each quadrant (0, 4, 8, 12: packing the
    # scales of several tensors in one tile), so it needs rows up to the last group's.
    if scale_parts <= int(rows[-1]):
        raise fail("shape-mismatch", f"{op}: a scale tile for {parts} data partitions needs "
                                     f"{int(rows[-1]) + 1} partitions (quadrant layout) or "
                                     f"exactly {groups}; got {scale_parts}")
    return rows


def unpack(t: NkiTensor) -> Arr:
    """x4 words [P, F4] -> fp32 values [P, F4, 4] (element j = byte/nibble j, little end)."""
    name = dtypes.mx_name(t.dtype)
    assert name is not None
    raw = np.ascontiguousarray(read_native(t)).reshape(t.shape[0], free_size(t))
    if name == "float4_e2m1fn_x4":
        b = raw.view(np.uint8)
        nib = np.stack([b & 0xF, b >> 4], axis=-1).reshape(t.shape[0], -1).astype(np.uint8)
        vals = nib.view(dtypes.MX_ELEMENT[name])
    else:
        vals = raw.view(np.uint8).view(dtypes.MX_ELEMENT[name])
    out: Arr = vals.astype(np.float32).reshape(t.shape[0], -1, 4)
    return out


def _pack(values: Arr, name: str) -> Arr:
    elem = values.astype(dtypes.MX_ELEMENT[name])
    if name == "float4_e2m1fn_x4":
        codes = elem.view(np.uint8) & 0xF
        pairs = codes.reshape(codes.shape[0], -1, 2)
        packed: Arr = (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8).view(np.uint16)
        return packed
    out: Arr = np.ascontiguousarray(elem).view(np.uint8).view(np.uint32)
    return out


def quantize_mx(dst: NkiTensor, src: NkiTensor, dst_scale: NkiTensor, name: Any = None) -> None:
    """fp16/bf16 [P, F] -> MXFP8 data [P, F/4] (x4) and one scale per 8x4 group."""
    op = "quantize_mx"
    _trn3(op)
    dst, src = on_chip(dst, op, "dst", allow_psum=False), on_chip(src, op, "src", allow_psum=False)
    dst_scale = on_chip(dst_scale, op, "dst_scale", allow_psum=False)
    kind = _mx(dst, op, "dst")
    if kind == "float4_e2m1fn_x4":
        raise fail("dtype-illegal", f"{op}: dst must be float8_e5m2_x4 or float8_e4m3fn_x4")
    if src.dtype not in (dtypes.float16, dtypes.bfloat16):
        raise fail("dtype-illegal", f"{op}: src {src.describe()} must be float16 or bfloat16")
    _scale_bytes_dtype(dst_scale, op, "dst_scale")
    parts, f = src.shape[0], free_size(src)
    if parts % 32 or f % 4 or dst.shape[0] != parts or free_size(dst) != f // 4:
        raise fail("shape-mismatch", f"{op}: src partitions must be a multiple of 32 and its "
                                     f"free size of 4; dst [P, F/4]; got src {src.describe()}, "
                                     f"dst {dst.describe()}")
    x = read(src).reshape(parts // 8, 8, f // 4, 4)
    amax = np.abs(x).max(axis=(1, 3))  # [P/8, F/4]
    exp = np.floor(np.log2(np.where(amax > 0, amax, 1.0))).astype(np.int64)
    biased = np.where(amax > 0, np.clip(exp - (_EMAX[kind] - 1) + 127, 0, 254), 0)
    scale = np.exp2(biased.astype(np.float64) - 127).astype(np.float32)
    q = np.clip(x / scale[:, None, :, None], -_FMAX[kind], _FMAX[kind])
    write(dst, _pack(q.reshape(parts, f), kind).reshape(dst.shape), op)
    rows = _group_rows(parts, dst_scale.shape[0], op)
    if free_size(dst_scale) < f // 4:
        raise fail("shape-mismatch", f"{op}: dst_scale {dst_scale.describe()} needs {f // 4} "
                                     "elements per partition")
    bytes_view = dst_scale.view(dtypes.uint8) if dst_scale.dtype != dtypes.uint8 else dst_scale
    current_bytes = read_native(bytes_view).reshape(dst_scale.shape[0], -1).copy()
    current_bytes[rows, :f // 4] = biased.astype(np.uint8)
    write(bytes_view, current_bytes.reshape(bytes_view.shape), op)
    count("vector", src.size)


def _dequantized(data: NkiTensor, scale: NkiTensor, op: str, role: str) -> Arr:
    """[K, F4] x4 data and its scales -> fp32 [K * 4, F4] with (k, q) as contraction."""
    vals = unpack(data)  # [K, F4, 4]
    parts, f4 = vals.shape[0], vals.shape[1]
    rows = _group_rows(parts, scale.shape[0], op)
    raw = read_native(scale.view(dtypes.uint8) if scale.dtype != dtypes.uint8 else scale)
    sc = raw.reshape(scale.shape[0], -1)[rows][:, :f4].astype(np.float64)
    if sc.shape[1] < f4:
        raise fail("shape-mismatch", f"{op}: {role} scale {scale.describe()} has fewer than "
                                     f"{f4} elements per partition")
    factor = np.repeat(np.exp2(sc - 127), 8, axis=0).astype(np.float32)  # [K, F4]
    deq = vals * factor[:, :, None]
    return np.ascontiguousarray(deq.transpose(0, 2, 1).reshape(parts * 4, f4))


def nc_matmul_mx(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor,
                 stationary_scale: NkiTensor, moving_scale: NkiTensor, tile_position: Any = None,
                 tile_size: Any = None, accumulate: bool | None = None,
                 name: Any = None) -> None:
    """dst[M, N] (PSUM) (+)= dequant(stationary)[K, M].T @ dequant(moving)[K, N]."""
    op = "nc_matmul_mx"
    _trn3(op)
    dst = on_chip(dst, op, "dst")
    if dst.buffer is not MemoryRegion.psum:
        raise fail("buffer-illegal", f"{op}: dst {dst.describe()} must be in PSUM")
    if dst.dtype not in (dtypes.float32, dtypes.bfloat16):
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must be float32 or bfloat16")
    tiles = [on_chip(t, op, r, allow_psum=False) for t, r in
             ((stationary, "stationary"), (moving, "moving"),
              (stationary_scale, "stationary_scale"), (moving_scale, "moving_scale"))]
    st, mv, st_scale, mv_scale = tiles
    _mx(st, op, "stationary")
    _mx(mv, op, "moving")
    for t, r in ((st_scale, "stationary_scale"), (mv_scale, "moving_scale")):
        _scale_bytes_dtype(t, op, r)
    k = st.shape[0]
    limit = 4096 if dst.dtype == dtypes.float32 else 8192
    if k != mv.shape[0] or k % 32 or free_size(st) % 2 or free_size(st) > 128 or \
            free_size(mv) > limit:
        raise fail("matmul-contraction", f"{op}: stationary {st.describe()} and moving "
                                         f"{mv.describe()} need equal partitions (a multiple of "
                                         f"32), an even stationary free size <= 128 and moving "
                                         f"free size <= {limit}")
    if dst.shape[0] != free_size(st) or free_size(dst) != free_size(mv):
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} must be "
                                     f"[{free_size(st)}, {free_size(mv)}]")
    s_arr = _dequantized(st, st_scale, op, "stationary")
    m_arr = _dequantized(mv, mv_scale, op, "moving")
    issue_matmul(dst, s_arr, m_arr, accumulate, [])
    count("tensor", dst.size)
