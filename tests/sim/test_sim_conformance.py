"""Conformance kernels in the `nki` dialect against NumPy references (--backend=sim|neuron)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray[Any, Any]:
    return rng.standard_normal(shape, dtype=np.float32)


def bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(a).view(np.uint16)


class TestElementwise:
    @pytest.mark.parametrize("shape", [(256, 1024), (300, 1100), (5, 7)])
    def test_tiled_add_matches_numpy(self, ck: ModuleType, launch: Any, rng: Any,
                                     shape: tuple[int, int]) -> None:
        """Tiled add equals a + b exactly, including ragged edge tiles."""
        a, b = f32(rng, *shape), f32(rng, *shape)
        np.testing.assert_array_equal(launch(ck.tiled_add, a, b), a + b)

    def test_bf16_add_rounds_like_ml_dtypes(self, ck: ModuleType, launch: Any,
                                            rng: Any) -> None:
        """bf16 add computes in fp32 and rounds to nearest even: bit-exact with ml_dtypes."""
        a = f32(rng, 256, 512).astype(BF16)
        b = f32(rng, 256, 512).astype(BF16)
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(BF16)
        got = launch(ck.tiled_add, a, b)
        assert got.dtype == BF16
        np.testing.assert_array_equal(bits(got), bits(want))

    def test_bf16_exp_rounds_like_ml_dtypes(self, ck: ModuleType, launch: Any,
                                            rng: Any) -> None:
        """Scalar-engine exp on bf16 rounds its fp32 result exactly as ml_dtypes does."""
        x = f32(rng, 256, 384).astype(BF16)
        want = np.exp(x.astype(np.float32)).astype(BF16)
        np.testing.assert_array_equal(bits(launch(ck.exp_kernel, x)), bits(want))


class TestNormalisations:
    def test_softmax_matches_numpy(self, ck: ModuleType, launch: Any, rng: Any) -> None:
        """Row softmax equals the NumPy reference to fp32 tolerance."""
        x = f32(rng, 256, 640) * 4
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(launch(ck.softmax, x), e / e.sum(axis=1, keepdims=True),
                                   rtol=1e-5, atol=1e-7)

    def test_bf16_softmax_is_close(self, ck: ModuleType, launch: Any, rng: Any) -> None:
        """bf16 softmax stays within bf16 rounding of the fp32 reference."""
        x = f32(rng, 128, 256)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        got = launch(ck.softmax, x.astype(BF16)).astype(np.float32)
        np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=2e-2, atol=1e-3)

    def test_rmsnorm_with_weight_matches_numpy(self, ck: ModuleType, launch: Any,
                                               rng: Any) -> None:
        """RMSNorm with a weight vector equals x / rms(x) * w."""
        x, w = f32(rng, 256, 512), f32(rng, 512)
        want = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(launch(ck.rmsnorm, x, w), want, rtol=1e-5, atol=1e-5)

    def test_layernorm_matches_numpy(self, ck: ModuleType, launch: Any, rng: Any) -> None:
        """LayerNorm through bn_stats/bn_aggr equals the NumPy reference."""
        x, g, b = f32(rng, 256, 384) + 3, f32(rng, 384), f32(rng, 384)
        mu, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
        want = (x - mu) / np.sqrt(var + 1e-5) * g + b
        np.testing.assert_allclose(launch(ck.layernorm, x, g, b), want, rtol=1e-4, atol=1e-4)


class TestTensorEngine:
    def test_tiled_matmul_accumulates_over_k(self, ck: ModuleType, launch: Any,
                                             rng: Any) -> None:
        """PSUM accumulation over 3 K tiles with M=256, N=1024 (several tiles each) is exact."""
        lhs_t, rhs = f32(rng, 384, 256), f32(rng, 384, 1024)
        np.testing.assert_allclose(launch(ck.matmul, lhs_t, rhs), lhs_t.T @ rhs,
                                   rtol=1e-4, atol=1e-4)

    def test_bf16_matmul_accumulates_in_fp32(self, ck: ModuleType, launch: Any,
                                             rng: Any) -> None:
        """bf16 inputs multiply into fp32 PSUM: the result is the fp32 product of bf16 values."""
        lhs_t = f32(rng, 256, 128).astype(BF16)
        rhs = f32(rng, 256, 512).astype(BF16)
        want = lhs_t.astype(np.float32).T @ rhs.astype(np.float32)
        got = launch(ck.matmul, lhs_t, rhs)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    def test_transpose_is_exact(self, ck: ModuleType, launch: Any, rng: Any) -> None:
        """Tensor Engine transpose of 128x128 blocks reproduces x.T bit for bit."""
        x = f32(rng, 256, 384)
        np.testing.assert_array_equal(launch(ck.transpose, x), x.T)


class TestLogicalCores:
    def test_lnc2_kernel_splits_work_by_program_id(self, ck: ModuleType, nki: ModuleType,
                                                   kernel_backend_name: str, rng: Any) -> None:
        """kernel[2] runs two programs whose halves together cover the whole output."""
        x = f32(rng, 512, 256)
        got = nki.simulate(ck.lnc2_scale[2])(x) if kernel_backend_name == "sim" else \
            ck.lnc2_scale[2](x)
        np.testing.assert_array_equal(got, 2 * x)
