"""Engine math: activation functions, promotion, nl reductions and the nisa instructions."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import ConstraintError, dtypes, ops
from nkibot.sim.storage import values as peek  # white-box: the tests read storage


def tile(nl: ModuleType, values: Any, dtype: Any = None) -> Any:
    arr = np.asarray(values, dtype=np.float32)
    t = nl.ndarray(arr.shape, dtype=nl.float32 if dtype is None else dtype, buffer=nl.sbuf)
    peek(t)[...] = arr.astype(peek(t).dtype)
    return t


class TestMath:
    def test_erf_matches_math_erf_to_fp32(self) -> None:
        """Our vectorised erf agrees with math.erf to within fp32 rounding."""
        x = np.linspace(-6, 6, 4001, dtype=np.float32)
        want = np.array([math.erf(float(v)) for v in x])
        got = ops.erf(x).astype(np.float64)
        assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)) < 2e-7

    def test_erf_is_correctly_rounded_on_both_branches(self) -> None:
        """Each fp32 result is math.erf rounded to fp32: on both sides of the 0.5 switch
        between the two rational forms, in the tails, and at the special values."""
        edge = np.float32(0.5)
        x = np.concatenate([
            np.linspace(-12, 12, 200_001, dtype=np.float32),
            np.nextafter(edge, np.float32(0)) * np.array([1, -1], np.float32),
            np.array([edge, -edge, 0.0, -0.0, 1e-30, 3.9, 4.1, 9.99, 10.5], np.float32)])
        want = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
        np.testing.assert_array_equal(ops.erf(x), want)
        specials = ops.erf(np.array([np.inf, -np.inf, np.nan], np.float32))
        assert specials[0] == 1.0 and specials[1] == -1.0 and np.isnan(specials[2])

    def test_softplus_and_mish_stay_within_a_few_ulp(self) -> None:
        """softplus (exp and log, no scalar log1p) is within 6 ulp of float64 on
        [-100, 100] and at the special values; mish on top of it within 10."""
        x = np.concatenate([np.linspace(-100, 100, 400_001, dtype=np.float32),
                            np.array([0.0, -0.0, 1e-30, -1e-30, 88.0, -87.0, 1e-8], np.float32)])
        for name, exact in (("softplus", np.logaddexp(0.0, x.astype(np.float64))),
                            ("mish", x * np.tanh(np.logaddexp(0.0, x.astype(np.float64))))):
            got = ops.UNARY[name](x)
            assert got.dtype == np.float32
            keep = np.abs(exact) > 1e-37  # below: denormal results, compared absolutely
            ulp = np.spacing(np.abs(exact[keep]).astype(np.float32)).astype(np.float64)
            err = np.abs(got[keep] - exact[keep]) / ulp
            assert err.max() <= (6 if name == "softplus" else 10), (name, err.max())
            assert np.max(np.abs(got[~keep] - exact[~keep])) < 1e-37
        specials = ops.UNARY["softplus"](np.array([np.inf, -np.inf, np.nan, -200], np.float32))
        assert specials[0] == np.inf and specials[1] == 0 and np.isnan(specials[2])
        assert specials[3] == 0
        assert float(ops.UNARY["softplus"](np.float32(0.0))) == pytest.approx(np.log(2.0))

    def test_gelu_variants(self, nl: ModuleType) -> None:
        """gelu (erf) and gelu_apprx_tanh match their closed forms."""
        x = np.linspace(-4, 4, 64, dtype=np.float32).reshape(2, 32)
        exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()])
        np.testing.assert_allclose(peek(nl.gelu(tile(nl, x))).ravel(), exact, atol=1e-6)
        approx = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        np.testing.assert_allclose(peek(nl.gelu_apprx_tanh(tile(nl, x))), approx, atol=1e-6)

    @pytest.mark.parametrize("name,ref", [
        ("silu", lambda x: x / (1 + np.exp(-x))),
        ("softplus", lambda x: np.log1p(np.exp(x))),
        ("mish", lambda x: x * np.tanh(np.log1p(np.exp(x)))),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        ("rsqrt", lambda x: 1 / np.sqrt(np.abs(x) + 1)),
    ])
    def test_activations(self, nl: ModuleType, name: str, ref: Any) -> None:
        """Activation functions agree with their NumPy definitions."""
        x = np.linspace(-5, 5, 40, dtype=np.float32).reshape(4, 10)
        arg = np.abs(x) + 1 if name == "rsqrt" else x
        got = peek(getattr(nl, name)(tile(nl, arg)))
        np.testing.assert_allclose(got, ref(x), rtol=1e-5, atol=1e-6)

    def test_promotion_rules(self) -> None:
        """float beats int, wider float wins, fp16 with bf16 gives fp32."""
        assert dtypes.promote(dtypes.bfloat16, dtypes.float16) == dtypes.float32
        assert dtypes.promote(dtypes.int32, dtypes.bfloat16) == dtypes.bfloat16
        assert dtypes.promote(dtypes.float32, dtypes.bfloat16) == dtypes.float32
        assert dtypes.promote(dtypes.int8, dtypes.int32) == dtypes.int32

    def test_binary_result_dtype_and_override(self, nl: ModuleType) -> None:
        """nl.add of bf16 and fp32 tiles gives fp32 unless dtype= says otherwise."""
        a, b = tile(nl, [[1.5]], nl.bfloat16), tile(nl, [[2.25]])
        assert nl.add(a, b).dtype == nl.float32
        assert nl.add(a, b, dtype=nl.bfloat16).dtype == ml_dtypes.bfloat16

    def test_tfloat32_rounds_mantissa_on_write(self, nl: ModuleType) -> None:
        """Writing into a tfloat32 tile keeps 10 mantissa bits."""
        t = nl.ndarray((1, 1), dtype=nl.tfloat32, buffer=nl.sbuf)
        t[...] = 1.0 + 2.0**-12
        assert float(peek(t)[0, 0]) == 1.0

    def test_int_tensor_tensor_is_exact(self, nl: ModuleType, nisa: ModuleType) -> None:
        """int32 arithmetic is native integer math, exact beyond fp32's 24 bits."""
        a = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        peek(a)[...] = 2**30 + 1
        nisa.tensor_tensor(dst=a, data1=a, data2=a, op=np.add)
        assert int(peek(a)[0, 0]) == 2**31 + 2 - 2**32


class TestReductions:
    def test_sum_max_mean_keepdims(self, nl: ModuleType) -> None:
        """nl reductions over free axes, with and without keepdims."""
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        t = tile(nl, x)
        assert nl.sum(t, axis=(1, 2)).shape == (2, 1)
        np.testing.assert_array_equal(peek(nl.max(t, axis=2, keepdims=True)),
                                      x.max(2, keepdims=True))
        np.testing.assert_allclose(peek(nl.mean(t, axis=2)), x.mean(2))
        assert nl.var(t, axis=2).shape == (2, 3, 1)

    def test_softmax_and_rms_norm(self, nl: ModuleType) -> None:
        """nl.softmax and nl.rms_norm follow their definitions."""
        x = np.random.default_rng(0).standard_normal((4, 16), dtype=np.float32)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(peek(nl.softmax(tile(nl, x), axis=1)),
                                   e / e.sum(1, keepdims=True), rtol=1e-6)
        w = np.full((4, 16), 2.0, np.float32)
        want = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * 2
        np.testing.assert_allclose(peek(nl.rms_norm(tile(nl, x), tile(nl, w), axis=1, n=16)),
                                   want, rtol=1e-5)

    def test_where_and_comparisons(self, nl: ModuleType) -> None:
        """nl.greater yields 1/0 and nl.where selects by it."""
        a, b = tile(nl, [[1, 5, 3]]), tile(nl, [[2, 2, 2]])
        cond = nl.greater(a, b)
        np.testing.assert_array_equal(peek(cond), [[0, 1, 1]])
        np.testing.assert_array_equal(peek(nl.where(cond, a, 0.0)), [[0, 5, 3]])


class TestIsa:
    def test_tensor_scalar_reverse_and_two_ops(self, nl: ModuleType, nisa: ModuleType) -> None:
        """(operand0 - data) * operand1 with a [P,1] operand broadcast along free dims."""
        data = tile(nl, [[1, 2], [3, 4]])
        col = tile(nl, [[10], [20]])
        dst = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst, data, np.subtract, col, reverse0=True, op1=nl.multiply,
                           operand1=2.0)
        np.testing.assert_array_equal(peek(dst), [[18, 16], [34, 32]])

    def test_activation_scale_bias_and_reduce(self, nl: ModuleType, nisa: ModuleType) -> None:
        """activation computes op(data*scale + bias) and sums it into reduce_res."""
        data = tile(nl, [[0, 1, 2], [1, 1, 1]])
        bias, total = tile(nl, [[1], [0]]), nl.ndarray((2, 1), dtype=nl.float32)
        dst = nl.ndarray((2, 3), dtype=nl.float32)
        nisa.activation(dst, nl.square, data, bias=bias, scale=2.0, reduce_op=nl.add,
                        reduce_res=total)
        np.testing.assert_array_equal(peek(dst), [[1, 9, 25], [4, 4, 4]])
        np.testing.assert_array_equal(peek(total), [[35], [12]])

    def test_iota_and_affine_select(self, nl: ModuleType, nisa: ModuleType) -> None:
        """iota generates offset + p*channel_multiplier + i*step; affine_select masks."""
        idx = nl.ndarray((3, 4), dtype=nl.int32)
        nisa.iota(idx, [[1, 4]], offset=0, channel_multiplier=-1)
        np.testing.assert_array_equal(peek(idx), np.arange(4)[None, :] - np.arange(3)[:, None])
        ones = nl.full((3, 4), 1.0, dtype=nl.float32)
        out = nl.ndarray((3, 4), dtype=nl.float32)
        nisa.affine_select(out, [[-1, 4]], 1, ones, -9.0, cmp_op=nl.greater_equal)
        np.testing.assert_array_equal(peek(out), np.where(np.tril(np.ones((3, 4))) > 0, 1, -9))

    def test_tensor_copy_predicated(self, nl: ModuleType, nisa: ModuleType) -> None:
        """Only predicated elements are copied; the rest of dst is untouched."""
        dst, src = tile(nl, [[0, 0, 0]]), tile(nl, [[7, 8, 9]])
        pred = nl.ndarray((1, 3), dtype=nl.uint8)
        peek(pred)[...] = [[1, 0, 1]]
        nisa.tensor_copy_predicated(dst, src, pred)
        np.testing.assert_array_equal(peek(dst), [[7, 0, 9]])

    def test_bn_stats_aggr_give_mean_and_variance(self, nl: ModuleType, nisa: ModuleType) -> None:
        """bn_stats over two chunks aggregated by bn_aggr equals mean and population var."""
        x = np.random.default_rng(1).standard_normal((4, 20), dtype=np.float32)
        st = nl.ndarray((4, 12), dtype=nl.float32)
        nisa.bn_stats(st[:, 0:6], tile(nl, x[:, :9]))
        nisa.bn_stats(st[:, 6:12], tile(nl, x[:, 9:]))
        mv = nl.ndarray((4, 2), dtype=nl.float32)
        nisa.bn_aggr(mv, st)
        np.testing.assert_allclose(peek(mv)[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(peek(mv)[:, 1], x.var(1), rtol=1e-5)

    def test_nl_matmul_and_transpose(self, nl: ModuleType) -> None:
        """nl.matmul (both layouts) and nl.transpose return PSUM tiles with the right values."""
        x = np.random.default_rng(2).standard_normal((32, 16), dtype=np.float32)
        y = np.random.default_rng(3).standard_normal((16, 8), dtype=np.float32)
        got = nl.matmul(tile(nl, x), tile(nl, y))
        assert got.buffer is nl.psum
        np.testing.assert_allclose(peek(got), x @ y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(peek(nl.matmul(tile(nl, x.T), tile(nl, y), transpose_x=True)),
                                   x @ y, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(peek(nl.transpose(tile(nl, x))), x.T)

    def test_memset_float_into_int_is_refused(self, nl: ModuleType, nisa: ModuleType) -> None:
        """memset's value must match the dtype: a float into an int tile is dtype-illegal."""
        with pytest.raises(ConstraintError, match="dtype-illegal"):
            nisa.memset(nl.ndarray((1, 1), dtype=nl.int32), 1.5)

    def test_exponential_needs_trn3(self, nl: ModuleType, nisa: ModuleType) -> None:
        """nisa.exponential is NeuronCore-v4 only; on the Trn1 target it is refused."""
        t = tile(nl, [[0.0]])
        with pytest.raises(ConstraintError, match="arch-unsupported"):
            nisa.exponential(t, t)
