"""PyTorch tensors at the launch boundary: in as NumPy views, results back as tensors.

The official simulator takes PyTorch tensors as well as NumPy arrays and returns
tensors for them (nki/guides/nki_simulator.rst, "nki.simulate() - Explicit API": the
result is compared with `torch.testing.assert_close`), so the SDK's PyTorch drivers run
unchanged. NumPy has no bfloat16, so a bf16 tensor crosses as its int16 bits viewed as
ml_dtypes.bfloat16: a view, so in-place writes still land in the caller's tensor. torch
is never imported here; a torch tensor's own module is used.
"""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np


def is_torch(arg: Any) -> bool:
    return type(arg).__module__.startswith("torch") and hasattr(arg, "detach")


def torch_to_numpy(arg: Any) -> np.ndarray[Any, Any]:
    """A CPU view of a torch tensor's storage (bf16 through its int16 bits)."""
    torch = sys.modules.get("torch")
    t = arg.detach().cpu()
    if torch is not None and t.dtype == torch.bfloat16:
        bits: np.ndarray[Any, Any] = t.view(torch.int16).numpy()
        return bits.view(ml_dtypes.bfloat16)
    arr: np.ndarray[Any, Any] = t.numpy()
    return arr


def numpy_to_torch(result: Any) -> Any:
    """Results (an array, a tuple of them, or None) as torch tensors."""
    if isinstance(result, tuple):
        return tuple(numpy_to_torch(r) for r in result)
    if not isinstance(result, np.ndarray):
        return result
    torch = sys.modules["torch"]
    if result.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(result.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(result)
