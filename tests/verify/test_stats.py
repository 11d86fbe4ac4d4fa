"""Error statistics of a kernel output against the reference (nkibot.verify.stats)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nkibot.task import Tolerance
from nkibot.verify.stats import (
    Expected,
    compare,
    dtype_ok,
    largest,
    mismatch_reason,
    near_constant,
)

TOL = Tolerance(atol=1e-3, rtol=1e-3)


def _exp(values: np.ndarray, dtype: str = "float32") -> Expected:
    return Expected(values=values, dtype=dtype, trial=2, seed=2, label="normal", output=0)


class TestCompare:
    def test_exact_match(self) -> None:
        """Identical outputs pass with zero error and no mismatches."""
        e = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
        stats = compare(_exp(e), e.copy(), "float32", TOL)
        assert stats.passed and stats.mismatched == 0 and stats.max_abs_error == 0.0
        assert stats.total == 128 and stats.shape_ok and stats.dtype_ok

    def test_allclose_rule(self) -> None:
        """An element passes iff |a - e| <= atol + rtol * |e|."""
        e = np.array([[1.0, 100.0]], dtype=np.float32)
        a = np.array([[1.0019, 100.12]], dtype=np.float32)  # 2e-3 budget, then 0.101
        stats = compare(_exp(e), a, "float32", TOL)
        assert not stats.passed
        assert stats.mismatched == 1
        assert stats.worst[0].index == [0, 1]
        assert abs(stats.max_abs_error - 0.12) < 1e-4

    def test_worst_elements_sorted_with_indices(self) -> None:
        """The worst five elements come largest error first with multi-dim indices."""
        e = np.zeros((4, 4), dtype=np.float32) + 1.0
        a = e.copy()
        for k, (i, j) in enumerate([(0, 1), (1, 2), (2, 3), (3, 0), (3, 3), (2, 2)]):
            a[i, j] += 0.1 * (k + 1)
        stats = compare(_exp(e), a, "float32", TOL)
        assert len(stats.worst) == 5
        assert stats.worst[0].index == [2, 2]
        errors = [w.abs_error for w in stats.worst]
        assert errors == sorted(errors, reverse=True)
        assert stats.mismatched == 6
        assert abs(stats.mean_abs_error - (0.1 * 21 / 16)) < 1e-5

    def test_nan_and_inf_counts(self) -> None:
        """NaN/Inf in the output are counted and mismatch, unless the reference matches."""
        e = np.array([1.0, np.inf, np.nan, 2.0], dtype=np.float32)
        a = np.array([np.nan, np.inf, np.nan, np.inf], dtype=np.float32)
        stats = compare(_exp(e), a, "float32", TOL)
        assert stats.nan_count == 2 and stats.inf_count == 2
        assert stats.mismatched == 2  # element 0 (NaN) and element 3 (Inf)
        assert not stats.passed

    def test_shape_mismatch(self) -> None:
        """A wrong shape fails every element and says which shapes."""
        e = np.zeros((4, 8), dtype=np.float32) + 1
        stats = compare(_exp(e), np.zeros((8, 4), dtype=np.float32), "float32", TOL)
        assert not stats.passed and not stats.shape_ok
        assert stats.mismatched == 32
        assert mismatch_reason(stats) == (
            "numeric:shape trial 2 output 0: expected [4, 8], got [8, 4]")

    def test_dtype_must_match_native(self) -> None:
        """Correct values in the wrong dtype fail with a dtype reason."""
        e = np.ones((2, 2), dtype=np.float32)
        stats = compare(_exp(e, "bfloat16"), e.copy(), "float32", TOL)
        assert not stats.passed and not stats.dtype_ok and stats.mismatched == 0
        assert mismatch_reason(stats).startswith("numeric:dtype trial 2 output 0: expected "
                                                 "bfloat16, got float32")

    def test_bf16_output_against_fp32_reference(self) -> None:
        """A bf16 output is compared to the fp32 reference within the given tolerance."""
        e = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
        a = e.astype(ml_dtypes.bfloat16)
        low = Tolerance(atol=2e-2, rtol=2e-2)
        assert compare(_exp(e, "bfloat16"), a, "bfloat16", low).passed
        # A tolerance tighter than bf16 can hold still accepts the output's own rounding
        # (one ulp at each value), and nothing more: two ulps off fails.
        tight = Tolerance(atol=1e-5, rtol=0)
        assert compare(_exp(e, "bfloat16"), a, "bfloat16", tight).passed
        two_ulps = (e.astype(np.float64) * (1 + 2.0 ** -6)).astype(ml_dtypes.bfloat16)
        assert not compare(_exp(e, "bfloat16"), two_ulps, "bfloat16", tight).passed

    def test_integers_compare_exactly(self) -> None:
        """Integer outputs get no tolerance."""
        e = np.array([1, 2, 3], dtype=np.int32)
        stats = compare(_exp(e, "int32"), np.array([1, 2, 4], dtype=np.int32), "int32", TOL)
        assert stats.mismatched == 1 and stats.atol == 0.0

    def test_mismatch_reason_names_trial_and_worst(self) -> None:
        """A numeric failure names the trial, the count and where the worst element is."""
        e = np.arange(6, dtype=np.float32).reshape(2, 3)
        a = e.copy()
        a[1, 2] = 9.0
        reason = mismatch_reason(compare(_exp(e), a, "float32", TOL))
        assert reason.startswith("numeric:mismatch trial 2 output 0 (normal): 1/6 elements")
        assert "at [1, 2]" in reason


class TestNearConstant:
    def test_zeros_fail_against_tiny_reference(self) -> None:
        """A tiny reference is compared relatively, so returning zeros fails."""
        e = (np.random.default_rng(2).standard_normal((64, 16)) * 1e-5).astype(np.float32)
        assert near_constant(e, TOL) is not None
        stats = compare(_exp(e), np.zeros_like(e), "float32", TOL)
        assert not stats.passed
        assert "near-constant" in stats.label
        assert compare(_exp(e), e * (1 + 1e-5), "float32", TOL).passed

    def test_constant_offset_fails(self) -> None:
        """A reference that barely varies around a constant rejects returning the constant."""
        rng = np.random.default_rng(3)
        e = (1000 + rng.standard_normal((64, 16)) * 0.1).astype(np.float32)
        assert near_constant(e, TOL) is not None
        constant = np.full_like(e, float(np.median(e)))
        assert not compare(_exp(e), constant, "float32", TOL).passed
        assert compare(_exp(e), e.copy(), "float32", TOL).passed

    def test_ordinary_reference_not_flagged(self) -> None:
        """A standard-normal reference is not near-constant."""
        e = np.random.default_rng(4).standard_normal((64, 16)).astype(np.float32)
        assert near_constant(e, TOL) is None


class TestReferenceError:
    """The fp32 reference's own error (against float64) bounds what fp32 can reach."""

    @staticmethod
    def _offset_matmul() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # KernelBench's offset +100 trial: every product ~1e4, sums of 2048 near 2e7
        rng = np.random.default_rng(5)
        a = (rng.random((64, 2048)) + 100).astype(np.float32)
        b = (rng.random((2048, 96)) + 100).astype(np.float32)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        ref = a @ b  # one fp32 summation order
        blocked = np.zeros_like(ref)  # another: 128-row K blocks added in fp32 (PSUM)
        for k in range(0, 2048, 128):
            blocked += a[:, k:k + 128] @ b[k:k + 128]
        return exact, ref, blocked

    def test_offset_matmul_within_twice_the_references_error_passes(self) -> None:
        exact, ref, blocked = self._offset_matmul()
        ref_error = float(np.abs(ref - exact).max())
        plain = _exp(ref)
        with_error = Expected(values=ref, dtype="float32", trial=0, seed=0,
                              label="offset +100", output=0, ref_error=ref_error)
        assert near_constant(ref, TOL) is not None  # compared relatively
        assert compare(with_error, blocked, "float32", TOL).passed
        assert compare(plain, blocked, "float32", TOL).passed  # within ULP_FLOOR too

    def test_cancellation_element_within_the_references_error(self) -> None:
        """KernelBench 13 at x10: an element near 0 by cancellation between terms of ~1e3
        carries their rounding; twice the reference's own error covers it, atol does not."""
        e = np.array([[1000.0, 0.0]], dtype=np.float32)
        a = np.array([[1000.0, 0.5]], dtype=np.float32)
        assert not compare(_exp(e), a, "float32", TOL).passed
        exp = Expected(values=e, dtype="float32", trial=0, seed=0, label="large magnitude",
                       output=0, ref_error=0.3)
        assert compare(exp, a, "float32", TOL).passed

    def test_slack_does_not_pass_a_wrong_kernel(self) -> None:
        """Off by far more than the reference's own error still fails, and a constant too."""
        exact, ref, _ = self._offset_matmul()
        ref_error = float(np.abs(ref - exact).max())
        exp = Expected(values=ref, dtype="float32", trial=0, seed=0, label="offset +100",
                       output=0, ref_error=ref_error)
        # 6x: 4x was 32.4, which rounds to exactly the 16-ulp floor at 2e7 (32) and passed
        assert not compare(exp, ref + 6 * ref_error, "float32", TOL).passed
        assert not compare(exp, np.full_like(ref, float(np.median(ref))), "float32", TOL).passed

    def test_slack_capped_by_the_outputs_loosest_tolerance(self) -> None:
        """A wildly inexact reference does not open the tolerance beyond atol + rtol * max|e|."""
        e = np.array([[1.0, 2.0]], dtype=np.float32)
        exp = Expected(values=e, dtype="float32", trial=0, seed=0, label="normal", output=0,
                       ref_error=10.0)
        assert not compare(exp, e + 0.5, "float32", TOL).passed

    @staticmethod
    def _kl_at_offset() -> tuple[float, float]:
        """KernelBench 98 (KLDivLoss, batchmean) at offset +100: both inputs are softmax rows
        plus 100, so terms of ~100 (log t - log p) cancel to a loss near zero.
        (PyTorch-like fp32 loss, its error against float64)"""
        rng = np.random.default_rng(8)
        rows = rng.standard_normal((2, 64, 4096))
        soft = np.exp(rows) / np.exp(rows).sum(axis=2, keepdims=True)
        p, t = (soft + 100).astype(np.float32)
        p64, t64 = p.astype(np.float64), t.astype(np.float64)
        exact = float(np.sum(t64 * (np.log(t64) - np.log(p64))) / 64)
        ref = float(np.sum(t * (np.log(t) - np.log(p)), dtype=np.float32) / np.float32(64))
        return ref, exact

    def test_ill_conditioned_stress_trial_compared_within_the_references_error(self) -> None:
        """A 0-d loss that cancels: PyTorch's fp32 value is itself far off the truth, so a
        kernel closer to the truth passes, labelled; a wrong one still fails."""
        ref, exact = self._kl_at_offset()
        ref_error = abs(ref - exact)
        exp = Expected(values=np.array(ref, dtype=np.float32), dtype="float32", trial=3,
                       seed=3, label="offset +100", output=0, ref_error=ref_error)
        closer = np.array(exact, dtype=np.float32)
        capped = Expected(values=exp.values, dtype="float32", trial=3, seed=3,
                          label="offset +100", output=0)
        assert not compare(capped, closer, "float32", TOL).passed  # without the error: fails
        stats = compare(exp, closer, "float32", TOL)
        assert stats.passed and stats.ill_conditioned
        assert "reference ill-conditioned" in stats.label
        for wrong in (ref + 3 * ref_error, 0.0, -ref):
            assert not compare(exp, np.array(wrong, dtype=np.float32), "float32", TOL).passed

    def test_normal_trials_never_widen(self) -> None:
        """The same reference error on a normal trial stays capped at the tolerance."""
        ref, exact = self._kl_at_offset()
        exp = Expected(values=np.array(ref, dtype=np.float32), dtype="float32", trial=0,
                       seed=0, label="normal", output=0, ref_error=abs(ref - exact))
        stats = compare(exp, np.array(exact, dtype=np.float32), "float32", TOL)
        assert not stats.passed and not stats.ill_conditioned

    def test_near_constant_negative_centre_gets_positive_ulps(self) -> None:
        """Around -0.99 (softsign of x - 100) the floor is ULP_FLOOR ulps, not negative."""
        rng = np.random.default_rng(6)
        e = (-0.99 + rng.standard_normal((32, 8)) * 1e-5).astype(np.float32)
        one_ulp = e + np.spacing(np.abs(e)).astype(np.float32)
        assert compare(_exp(e), one_ulp, "float32", TOL).passed


    def test_blocked_matvec_within_the_ulp_floor(self) -> None:
        """KernelBench 4 at offset +100: 16 blocks of 128 added in fp32 are ~10 ulps off;
        16 ulps pass it, while an error of a single term (~1e4) still fails."""
        rng = np.random.default_rng(7)
        a = (rng.random((256, 2048)) + 100).astype(np.float32)
        b = (rng.random((2048, 1)) + 100).astype(np.float32)
        ref = a @ b
        blocked = np.zeros_like(ref)
        for k in range(0, 2048, 128):
            blocked += a[:, k:k + 128] @ b[k:k + 128]
        assert near_constant(ref, TOL) is not None
        assert compare(_exp(ref), blocked, "float32", TOL).passed
        missing = blocked - a[:, :1] * b[:1]  # one product left out
        assert not compare(_exp(ref), missing, "float32", TOL).passed


class TestDtypeOk:
    def test_64_bit_outputs_accept_32_bit(self) -> None:
        """NKI has no 64-bit types, so float64/int64 references accept the 32-bit dtype."""
        assert dtype_ok("float64", "float32") and dtype_ok("int64", "int32")
        assert not dtype_ok("float32", "float16")


def _near_constant_by_definition(e: np.ndarray, tol: Tolerance) -> tuple[float, float] | None:
    """The element-wise rule, every element checked against 0 and then the median."""
    finite = e.astype(np.float64)[np.isfinite(e)]
    if finite.size == 0:
        return None
    for centre in (0.0, float(np.median(finite))):
        if np.all(np.abs(finite - centre) <= tol.atol + tol.rtol * np.abs(finite)):
            return centre, float(np.max(np.abs(finite - centre)))
    return None


class TestFastPaths:
    """The shortcuts taken for large outputs decide exactly as the plain definitions."""

    def test_near_constant_agrees_with_the_element_wise_rule(self) -> None:
        rng = np.random.default_rng(7)
        tols = [TOL, Tolerance(atol=0.0, rtol=1e-2), Tolerance(atol=1e-5, rtol=0.0)]
        cases = 0
        for _ in range(400):
            n = int(rng.integers(1, 300))
            centre = float(rng.choice([0.0, 1.0, -3.0, 100.0, 2.07e7]))
            spread = float(rng.choice([0.0, 1e-7, 1e-4, 1e-3, 0.05, 1.0]))
            e = (centre + spread * rng.standard_normal(n)).astype(np.float32)
            if rng.random() < 0.2:
                e[rng.integers(0, n)] = rng.choice([np.nan, np.inf, -np.inf])
            for tol in tols:
                assert near_constant(e, tol) == _near_constant_by_definition(e, tol)
                cases += near_constant(e, tol) is not None
        assert cases > 100  # both answers were exercised

    def test_near_constant_is_the_same_in_pieces(self) -> None:
        """Judged a few elements at a time, near_constant decides as in one piece."""
        rng = np.random.default_rng(8)
        for _ in range(200):
            n = int(rng.integers(1, 200))
            e = (float(rng.choice([0.0, 5.0])) + float(rng.choice([0.0, 1e-4, 1.0])) *
                 rng.standard_normal(n)).astype(np.float32)
            if rng.random() < 0.3:
                e[rng.integers(0, n)] = rng.choice([np.nan, np.inf])
            assert near_constant(e, TOL, chunk=3) == near_constant(e, TOL, chunk=1 << 20)

    def test_compare_in_pieces_reports_what_one_piece_does(self) -> None:
        """Every statistic of a piecewise comparison (pieces of 1, 5 and 64 elements) is the
        one-piece value: counts, extremes and the worst elements exactly, means to 1e-12,
        across NaN, infinities, near-constant and ill-conditioned references, bf16
        outputs, stress labels and exact tolerances."""
        rng = np.random.default_rng(11)
        failing = 0
        for case in range(300):
            shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(0, 4))))
            e = (rng.standard_normal(shape) * float(rng.choice([1e-6, 1.0, 1e3]))).astype(
                np.float32)
            if case % 7 == 1:
                e = (3.0 + 1e-7 * rng.standard_normal(shape)).astype(np.float32)
            a = (e + rng.standard_normal(shape) * float(rng.choice([0, 1e-5, 1e-3, 1]))
                 ).astype(np.float32)
            if e.size and case % 5 == 2:
                e.flat[int(rng.integers(e.size))] = np.nan
            if a.size and case % 6 == 3:
                a.flat[int(rng.integers(a.size))] = rng.choice([np.nan, np.inf])
            dtype = "bfloat16" if case % 9 == 4 else "float32"
            actual = a.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else a
            exp = Expected(values=e, dtype=dtype, trial=1, seed=1, output=0,
                           label=str(rng.choice(["normal", "offset +100"])),
                           ref_error=float(rng.choice([0.0, 1e-6, 1e-2])))
            tol = [TOL, Tolerance(atol=1e-5, rtol=0.0), Tolerance(atol=0.0, rtol=0.0)][case % 3]
            whole = compare(exp, actual, dtype, tol, chunk=1 << 20).model_dump()
            failing += not whole["passed"]
            for chunk in (1, 5, 64):
                part = compare(exp, actual, dtype, tol, chunk=chunk).model_dump()
                for key, want in whole.items():
                    got = part[key]
                    if isinstance(want, float) and np.isfinite(want):
                        assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (case, key)
                    else:
                        assert repr(got) == repr(want), (case, chunk, key)
        assert 30 < failing < 270  # both verdicts were exercised

    def test_largest_are_the_biggest_first_then_by_position(self) -> None:
        rng = np.random.default_rng(3)
        for _ in range(300):
            v = rng.integers(0, 4, int(rng.integers(1, 40))).astype(np.float64)
            if rng.random() < 0.3:
                v[rng.integers(0, v.size)] = np.inf
            want = sorted(range(v.size), key=lambda i: (-v[i], i))[:5]
            assert list(largest(v, 5)) == want


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)).astype(np.float32)


class TestAggregate:
    """Errors small per element but large against the output's scale (issue 26, class 1)."""

    def test_constant_just_under_atol_on_softmax_fails(self) -> None:
        """Adding 0.99 * atol to every element of a softmax passes each element, while its
        rows sum to about 1.58: the aggregate check refuses it, naming the bias."""
        e = _softmax(np.random.default_rng(1).standard_normal((64, 580)))
        a = (e + np.float32(0.99e-3)).astype(np.float32)
        assert float(a.sum(axis=-1).mean()) > 1.5
        stats = compare(_exp(e), a, "float32", TOL)
        assert stats.mismatched == 0 and not stats.aggregate_ok and not stats.passed
        assert stats.bias > 9e-4
        reason = mismatch_reason(stats)
        assert reason.startswith("numeric:aggregate trial 2 output 0") and "bias +0.00099" in (
            reason)

    def test_noise_just_under_atol_fails(self) -> None:
        """Random signs of the same size (no bias, rows still sum to 1) fail too."""
        e = _softmax(np.random.default_rng(2).standard_normal((64, 580)))
        signs = np.where(np.random.default_rng(3).random(e.shape) < 0.5, -1, 1)
        a = (e + signs * np.float32(0.9e-3)).astype(np.float32)
        stats = compare(_exp(e), a, "float32", TOL)
        assert stats.mismatched == 0 and not stats.aggregate_ok

    def test_honest_rounding_passes(self) -> None:
        """A softmax computed another way (float64, summed in another order, rounded to
        fp32) and a bf16 rounding of a GEMM both pass the aggregate check."""
        x = np.random.default_rng(4).standard_normal((64, 580))
        e = _softmax(x.astype(np.float32))
        other = np.exp(x - x.max(axis=-1, keepdims=True))
        other = (other / other[:, ::-1].sum(axis=-1, keepdims=True)).astype(np.float32)
        assert compare(_exp(e), other, "float32", TOL).passed
        g = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float32)
        low = Tolerance(atol=2e-2, rtol=2e-2)
        rounded = g.astype(ml_dtypes.bfloat16)
        assert compare(_exp(g, "bfloat16"), rounded, "bfloat16", low).passed

    def test_scalars_are_judged_per_element_only(self) -> None:
        """Too few elements (a loss, a handful of norms) for a mean to say anything: no
        aggregate limit, only the per-element rule."""
        e = np.linspace(-1.0, 1.0, 20, dtype=np.float32)
        stats = compare(_exp(e), e + np.float32(9e-4), "float32", TOL)
        assert stats.passed and stats.aggregate_limit is None


class TestLowPrecisionOutputs:
    def test_bf16_gemm_at_offset_passes_within_an_output_ulp(self) -> None:
        """Issue 30: a correct bf16 GEMM at offset +100 has outputs near 1e7 (one bf16 ulp
        is 65536), compared relatively as near-constant; its rounding error, up to half an
        ulp, passes, while the same error on an fp32 output does not."""
        rng = np.random.default_rng(6)
        k = 1024
        lhs = (rng.standard_normal((128, k)) + 100).astype(ml_dtypes.bfloat16)
        rhs = (rng.standard_normal((k, 128)) + 100).astype(ml_dtypes.bfloat16)
        e = lhs.astype(np.float32) @ rhs.astype(np.float32)
        assert 9e6 < float(e.mean()) < 1.1e7
        out = e.astype(ml_dtypes.bfloat16)
        low = Tolerance(atol=2e-2, rtol=2e-2)
        offset = Expected(values=e, dtype="bfloat16", trial=5, seed=1, label="offset +100",
                          output=0)
        stats = compare(offset, out, "bfloat16", low)
        assert "near-constant" in stats.label and stats.max_abs_error > 1000
        assert stats.passed, mismatch_reason(stats)
        as_fp32 = Expected(values=e, dtype="float32", trial=5, seed=1, label="offset +100",
                           output=0)
        assert not compare(as_fp32, out.astype(np.float32), "float32", low).passed

    def test_bf16_constant_bias_still_fails(self) -> None:
        """An output ulp does not excuse a bias: a bf16 softmax shifted by 0.9 * atol fails."""
        e = _softmax(np.random.default_rng(7).standard_normal((64, 580)))
        low = Tolerance(atol=2e-2, rtol=2e-2)
        a = (e + np.float32(0.018)).astype(ml_dtypes.bfloat16)
        stats = compare(_exp(e, "bfloat16"), a, "bfloat16", low)
        assert not stats.passed and not stats.aggregate_ok


class TestSpecialValues:
    def _special(self, values: np.ndarray) -> Expected:
        return Expected(values=values, dtype="float32", trial=7, seed=3,
                        label="special values", output=0)

    def test_reference_nan_is_not_compared_except_on_normal_trials(self) -> None:
        """On a stress trial an element the reference has no value for (NaN) is not
        compared; on a normal trial the kernel must match the NaN."""
        e = np.array([1.0, np.nan, 2.0] * 16, dtype=np.float32)
        a = np.array([1.0, 7.0, 2.0] * 16, dtype=np.float32)
        special = compare(self._special(e), a, "float32", TOL)
        assert special.passed and special.out_of_domain == 16
        large = Expected(values=e, dtype="float32", trial=5, seed=5, label="large magnitude",
                         output=0)
        assert compare(large, a, "float32", TOL).out_of_domain == 16
        assert not compare(_exp(e), a, "float32", TOL).passed

    def test_sign_by_division_fails_at_zero(self) -> None:
        """`x / |x|` for sign gives NaN at exactly 0, where torch.sign gives 0."""
        x = np.array([0.0, -0.0, 1.5, -2.0] * 16, dtype=np.float32)
        with np.errstate(invalid="ignore"):
            a = (x / np.abs(x)).astype(np.float32)
        stats = compare(self._special(np.sign(x)), a, "float32", TOL)
        assert not stats.passed and stats.mismatched == 32 and stats.nan_count == 32


class TestOverflow:
    """KernelBench level 1 90 (cumprod) failed 2 of 10 trials in one run of three."""

    @staticmethod
    def _large(values: np.ndarray) -> Expected:
        return Expected(values=values, dtype="float32", trial=5, seed=5,
                        label="large magnitude", output=0)

    def test_cumprod_past_doubles_range_then_zero(self) -> None:
        """PyTorch's CPU cumprod accumulates in double: past double's range its product is
        inf and a later exact 0 makes it NaN, where exp(sum of log|x|) * sign gives the true
        0. On the large-magnitude trial those NaNs are not compared; the elements before
        them still are."""
        import torch

        x = torch.full((64, 400), 9.0) * torch.where(torch.arange(400) % 3 == 0, -1.0, 1.0)
        x[:, 350] = 0.0
        ref = torch.cumprod(x, 1).numpy()
        assert np.isnan(ref[:, 351:]).all() and np.isinf(ref[:, 340]).all()
        x64 = x.numpy().astype(np.float64)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            logs = np.cumsum(np.log(np.abs(x.numpy())), axis=1, dtype=np.float32)
            honest = (np.exp(logs) * np.cumprod(np.sign(x64), axis=1)).astype(np.float32)
        assert (honest[:, 351:] == 0).all()
        stats = compare(self._large(ref), honest, "float32", TOL)
        assert stats.passed and stats.out_of_domain == 64 * 50
        assert not compare(_exp(ref), honest, "float32", TOL).passed
        wrong = honest.copy()
        wrong[:, :10] *= 1.01  # finite elements are still compared
        assert not compare(self._large(ref), wrong, "float32", TOL).passed

    def test_inf_and_the_largest_finite_value_match_at_the_edge(self) -> None:
        """3.402809e38 (4e-6 below fp32's largest) against inf, of the same sign, is within
        rtol; further from the edge, or of the other sign, it is not."""
        big = float(np.finfo(np.float32).max)
        e = np.array([3.402809e38, -3.402809e38, np.inf, -np.inf] * 8, dtype=np.float32)
        a = np.array([np.inf, -np.inf, 3.4025e38, -big] * 8, dtype=np.float32)
        stats = compare(_exp(e), a, "float32", TOL)
        assert stats.passed and stats.max_abs_error == 0.0
        for far in ([1e38, -1e38, 1e38, -1e38], [-np.inf, np.inf, -big, big]):
            a = np.array(far * 8, dtype=np.float32)
            assert compare(_exp(e), a, "float32", TOL).mismatched == 32

    def test_an_infinite_reference_is_matched_only_by_itself(self) -> None:
        """Against inf, atol + rtol * |inf| is inf: a finite value far from the edge, or the
        other infinity, passed the allclose rule (and a bf16 output's ulp rule) before."""
        e = np.array([np.inf, -np.inf] * 16, dtype=np.float32)
        for dtype, a in (("float32", np.array([1.0, -np.inf] * 16, dtype=np.float32)),
                         ("float32", np.array([-np.inf, np.inf] * 16, dtype=np.float32)),
                         ("bfloat16", np.array([1.0, 2.0] * 16).astype(ml_dtypes.bfloat16))):
            stats = compare(_exp(e, dtype), a, dtype, TOL)
            assert not stats.passed and stats.mismatched >= 16
