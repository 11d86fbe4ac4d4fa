"""PyTorch tensors in, PyTorch tensors out, as the official simulator's explicit API
(nki/guides/nki_simulator.rst compares its result with torch.testing.assert_close)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import torch

KERNEL = """
    @nki.jit
    def k(a, b):
        ta = nl.load(a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(ta, nl.load(b)))
        return out
    """


def test_bf16_torch_inputs_give_a_bf16_torch_result(nki: ModuleType, kernel_file: Any) -> None:
    a = torch.arange(128 * 4, dtype=torch.float32).reshape(128, 4).to(torch.bfloat16)
    b = torch.full((128, 4), 0.5, dtype=torch.bfloat16)
    out = nki.simulate(kernel_file(KERNEL).k)(a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, (a.float() + 0.5).to(torch.bfloat16))


def test_numpy_inputs_still_give_numpy(nki: ModuleType, kernel_file: Any) -> None:
    a = np.ones((128, 4), np.float32)
    out = nki.simulate(kernel_file(KERNEL).k)(a, a)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, 2 * a)


def test_a_kernel_writing_a_bf16_torch_input_updates_it(nki: ModuleType,
                                                        kernel_file: Any) -> None:
    mod = kernel_file("""
        @nki.jit
        def k(a):
            t = nl.load(a)
            nl.store(a, nl.multiply(t, 2.0))
        """)
    a = torch.full((128, 4), 1.5, dtype=torch.bfloat16)
    assert nki.simulate(mod.k)(a) is None
    torch.testing.assert_close(a, torch.full((128, 4), 3.0, dtype=torch.bfloat16))
