"""What the harness parent and its children agree on: dtype names and array files.

Arrays travel as `.npy` files loaded with `allow_pickle=False`. NumPy cannot describe
ml_dtypes types (bfloat16, float8) in a `.npy` header, so those are stored as their raw
bits (uint16/uint8) and the dtype name travels beside the path in the JSON. This module
imports neither torch nor pydantic: the kernel child must start fast and torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

#: Our dtype names -> NumPy dtypes (ml_dtypes for the ones NumPy lacks).
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}
_BITS = {"bfloat16": np.uint16, "float8_e4m3": np.uint8, "float8_e5m2": np.uint8}
LOW_PRECISION = frozenset({"bfloat16", "float16", "float8_e4m3", "float8_e5m2"})


def dtype_name(dtype: np.dtype[Any]) -> str:
    """Our name for a NumPy dtype ("bfloat16", "float32", ...); NumPy's name otherwise."""
    for name, known in NUMPY_DTYPES.items():
        if known == dtype:
            return name
    if dtype == np.dtype(ml_dtypes.float8_e4m3):
        return "float8_e4m3"
    return str(dtype)


def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


def save_array(path: Path, array: np.ndarray[Any, Any]) -> dict[str, Any]:
    """Save `array` to `path` (.npy) and return its JSON descriptor {file, dtype, shape}."""
    name = dtype_name(array.dtype)
    data = np.ascontiguousarray(array)
    if name in _BITS:
        data = data.view(_BITS[name])
    np.save(path, data, allow_pickle=False)
    return {"file": str(path), "dtype": name, "shape": list(array.shape)}


def load_array(descriptor: dict[str, Any]) -> np.ndarray[Any, Any]:
    """Load an array saved by `save_array` from its descriptor."""
    data: np.ndarray[Any, Any] = np.load(descriptor["file"], allow_pickle=False)
    name = str(descriptor["dtype"])
    if name in _BITS:
        data = data.view(NUMPY_DTYPES[name])
    return data


def random_array(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Standard-normal floats (small non-negative integers, random booleans) of one spec."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    target = NUMPY_DTYPES.get(dtype, np.dtype(np.float32))
    if is_float(dtype):
        return rng.standard_normal(shape, dtype=np.float32).astype(target)
    return rng.integers(0, 16, size=shape).astype(target)


def to_kernel_dtype(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """NKI has no 64-bit integers: int64 tensors (class indices, BatchNorm's
    num_batches_tracked) reach kernels as int32. Values outside int32 are refused."""
    if array.dtype != np.int64:
        return array
    info = np.iinfo(np.int32)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise ValueError("an int64 input holds values outside int32, which NKI kernels "
                         "cannot take")
    return array.astype(np.int32)
