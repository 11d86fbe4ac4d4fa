"""Arrays cross the harness boundary in dtypes NKI kernels can take."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkibot.verify.protocol import NUMPY_DTYPES, load_array, save_array, to_kernel_dtype


class TestToKernelDtype:
    def test_int64_becomes_int32_with_values_kept(self) -> None:
        """Class indices and counters (int64 in PyTorch) reach kernels as int32."""
        out = to_kernel_dtype(np.array([0, 3, -7, 2**31 - 1], dtype=np.int64))
        assert out.dtype == np.int32
        assert out.tolist() == [0, 3, -7, 2**31 - 1]

    def test_other_dtypes_pass_through_untouched(self) -> None:
        """Floats and narrower integers are the same object, not a copy."""
        for array in (np.ones(3, np.float32), np.ones(3, np.int32), np.ones(3, np.uint8)):
            assert to_kernel_dtype(array) is array

    def test_values_outside_int32_are_refused(self) -> None:
        """An int64 value that int32 cannot hold is an error, never silently wrapped."""
        with pytest.raises(ValueError, match="outside int32"):
            to_kernel_dtype(np.array([2**40], dtype=np.int64))


class TestSaveArray:
    @pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
    def test_zero_d_output_keeps_its_shape(self, tmp_path: Path, dtype: str) -> None:
        """A loss's 0-d result is saved and read back as (), not (1,) (np.ascontiguousarray
        alone makes it 1-d, and the shape check then refused every 0-d reference)."""
        value = np.array(3.0, dtype=NUMPY_DTYPES[dtype])
        descriptor = save_array(tmp_path / "out.npy", value)
        assert descriptor["shape"] == []
        loaded = load_array(descriptor)
        assert loaded.shape == ()
        assert float(loaded.astype(np.float32)) == 3.0
