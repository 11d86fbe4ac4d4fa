"""The NKI dtype table: NumPy/ml_dtypes storage types, promotion and rounding on write.

NKI dtypes are NumPy dtypes here, so `tensor.dtype` interoperates with NumPy code in
kernels (`np.float32`, `a.dtype`). bf16/fp8 use ml_dtypes (round to nearest even on
cast). tfloat32 is stored as float32 tagged with dtype metadata and its mantissa is
rounded to 10 bits on write.
"""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np

from nkibot.sim.errors import fail

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
tfloat32 = np.dtype(np.float32, metadata={"nki": "tfloat32"})
# NKI's float8_e4m3 is the IEEE-style e4m3 (with inf); ml_dtypes calls it float8_e4m3.
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)

#: Stored as float32 when NKI_PRECISE_FP=0 (nki/guides/nki_simulator.rst:123-136: "When
#: disabled, all low-precision tensors are stored as float32"; precise mode stores
#: "bfloat16, float8_e4m3, float8_e5m2" with ml_dtypes, so these are the ones it widens).
LOW_PRECISION = (bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2)
_LOW_PRECISION = frozenset(LOW_PRECISION)  # a hashed test: `==` on dtypes costs ~0.3 µs


def precise_fp() -> bool:
    """NKI_PRECISE_FP: 1 (the default) or unset rounds on store; 0 keeps float32 values."""
    return os.environ.get("NKI_PRECISE_FP", "1").strip() != "0"


def storage_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype an allocation of `dt` is stored in: float32 for low-precision floats
    when NKI_PRECISE_FP=0, else `dt` itself."""
    # The dtype test first: reading the environment costs more than an allocation's
    # other bookkeeping, and only low-precision dtypes depend on it.
    if dt in _LOW_PRECISION and not precise_fp():
        return float32
    return dt


# MX (OCP microscaling, NeuronCore-v4): x4 types pack four 8-bit (or 4-bit) elements in
# one 32-bit (16-bit) word, stored as uint32/uint16 tagged like tfloat32; the scale type
# float8_e8m0fnu is a biased exponent byte.
float8_e5m2_x4 = np.dtype(np.uint32, metadata={"nki": "float8_e5m2_x4"})
float8_e4m3fn_x4 = np.dtype(np.uint32, metadata={"nki": "float8_e4m3fn_x4"})
float4_e2m1fn_x4 = np.dtype(np.uint16, metadata={"nki": "float4_e2m1fn_x4"})
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
#: Each x4 type's element type.
MX_ELEMENT: dict[str, Any] = {"float8_e5m2_x4": ml_dtypes.float8_e5m2,
                              "float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn,
                              "float4_e2m1fn_x4": ml_dtypes.float4_e2m1fn}

FLOATS = (float32, float16, bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2)
INTS = (int8, int16, int32, uint8, uint16, uint32, bool_)
_BY_NAME: dict[str, np.dtype[Any]] = {
    "float32": float32, "float16": float16, "bfloat16": bfloat16, "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3, "float8_e4m3fn": float8_e4m3fn, "float8_e5m2": float8_e5m2,
    "int8": int8, "int16": int16, "int32": int32, "uint8": uint8, "uint16": uint16,
    "uint32": uint32, "bool": bool_, "bool_": bool_, "float8_e5m2_x4": float8_e5m2_x4,
    "float8_e4m3fn_x4": float8_e4m3fn_x4, "float4_e2m1fn_x4": float4_e2m1fn_x4,
    "float8_e8m0fnu": float8_e8m0fnu,
}
_LEGAL = {d.str for d in FLOATS} | {d.str for d in INTS} | {float8_e8m0fnu.str}


def is_tf32(dt: np.dtype[Any]) -> bool:
    return dt.metadata is not None and dt.metadata.get("nki") == "tfloat32"


def mx_name(dt: np.dtype[Any]) -> str | None:
    """The x4 type's name, or None for any other dtype."""
    tag = dt.metadata.get("nki") if dt.metadata is not None else None
    return tag if tag in MX_ELEMENT else None


#: `name` of dtypes without metadata, filled as they are met: NumPy computes `dtype.name`
#: in Python (~4 µs), and checks ask for it at every allocation and matmul.
_NAMES: dict[np.dtype[Any], str] = {}


def name(dt: np.dtype[Any]) -> str:
    if dt.metadata is not None:  # tagged dtypes compare equal to their storage dtype
        if "nki" in dt.metadata:
            return str(dt.metadata["nki"])
        return "bool_" if dt == bool_ else str(dt.name)
    found = _NAMES.get(dt)
    if found is None:
        found = _NAMES[dt] = "bool_" if dt == bool_ else str(dt.name)
    return found


def normalize(dtype: Any, what: str = "dtype") -> np.dtype[Any]:
    """Turn an nl dtype, NumPy dtype/type or name into a legal NKI dtype, or refuse it."""
    if isinstance(dtype, np.dtype) and dtype.str in _LEGAL:
        return dtype
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except TypeError:
        raise fail("dtype-illegal", f"{what}: {dtype!r} is not a dtype") from None
    if dt.str not in _LEGAL:
        raise fail("dtype-illegal", f"{what}: {dt} is not an NKI dtype (no float64/int64)")
    return dt


def is_float(dt: np.dtype[Any]) -> bool:
    return dt.kind == "f" or dt.kind == "V" or dt in FLOATS


def promote(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    """NKI promotion: float beats int, the wider float wins, fp16 with bf16 gives fp32."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa != fb:
        return a if fa else b
    if fa:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        return float32 if a.itemsize >= 2 else bfloat16
    if a.itemsize != b.itemsize:
        return a if a.itemsize > b.itemsize else b
    return int32


def round_tf32(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Round float32 values to tfloat32's 10-bit mantissa (nearest even), in place."""
    bits = x.view(np.uint32)
    lsb = (bits >> 13) & 1
    bits += np.uint32(0x0FFF) + lsb
    bits &= np.uint32(0xFFFFE000)
    return x


def write(dst: np.ndarray[Any, Any], value: Any, dst_dtype: np.dtype[Any]) -> None:
    """Round the fp32 `value` on write into `dst` (NumPy/ml_dtypes round to nearest even)."""
    np.copyto(dst, value, casting="unsafe")
    if is_tf32(dst_dtype):
        round_tf32(dst)
