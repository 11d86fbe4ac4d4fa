"""PSUM accumulation groups: deferred matmuls give the same values as eager execution."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

from nkibot.sim import activate


@pytest.fixture
def mats() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(7)
    return (rng.standard_normal((384, 128), dtype=np.float32),
            rng.standard_normal((384, 512), dtype=np.float32))


class TestPsumGroups:
    def test_reused_operand_tiles_are_not_clobbered(self, nki: ModuleType, kernel_file: Any,
                                                    mats: Any) -> None:
        """Operand tiles refilled every K step still contribute their old values."""
        mod = kernel_file("""
            @nki.jit
            def k(lt, r):
                out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
                s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                m = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for kk in nl.sequential_range(3):
                    nisa.dma_copy(dst=s, src=lt[kk * 128:(kk + 1) * 128, :])
                    nisa.dma_copy(dst=m, src=r[kk * 128:(kk + 1) * 128, :])
                    nisa.nc_matmul(dst=acc, stationary=s, moving=m)
                res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nl.store(out, value=res)
                return out
            """)
        lt, r = mats
        np.testing.assert_allclose(nki.simulate(mod.k)(lt, r), lt.T @ r, rtol=1e-4, atol=1e-4)

    def test_interleaved_regions_of_one_tile(self, nki: ModuleType, kernel_file: Any,
                                             mats: Any) -> None:
        """Alternating matmuls into two halves of one PSUM tile accumulate separately."""
        mod = kernel_file("""
            @nki.jit
            def k(lt, r):
                out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for kk in nl.affine_range(3):
                    s = nl.load(lt[kk * 128:(kk + 1) * 128, :])
                    for h in nl.affine_range(2):
                        m = nl.load(r[kk * 128:(kk + 1) * 128, h * 256:(h + 1) * 256])
                        nisa.nc_matmul(acc[:, h * 256:(h + 1) * 256], s, m)
                res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nl.store(out, value=res)
                return out
            """)
        lt, r = mats
        np.testing.assert_allclose(nki.simulate(mod.k)(lt, r), lt.T @ r, rtol=1e-4, atol=1e-4)

    def test_accumulate_false_restarts_the_group(self, nki: ModuleType, kernel_file: Any,
                                                 mats: Any) -> None:
        """accumulate=(k > 0) in a second pass overwrites what the first pass summed."""
        mod = kernel_file("""
            @nki.jit
            def k(lt, r):
                out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for rep in nl.static_range(2):
                    for kk in nl.affine_range(3):
                        s = nl.load(lt[kk * 128:(kk + 1) * 128, :])
                        m = nl.load(r[kk * 128:(kk + 1) * 128, :])
                        nisa.nc_matmul(acc, s, m, accumulate=(kk > 0))
                res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nl.store(out, value=res)
                return out
            """)
        lt, r = mats
        np.testing.assert_allclose(nki.simulate(mod.k)(lt, r), lt.T @ r, rtol=1e-4, atol=1e-4)

    def test_default_accumulate_infers_per_element(self, nki: ModuleType, kernel_file: Any,
                                                   mats: Any) -> None:
        """With accumulate=None, a wider matmul adds where PSUM was matmul-written only."""
        mod = kernel_file("""
            @nki.jit
            def k(lt, r):
                out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                s = nl.load(lt[0:128, :])
                nisa.nc_matmul(acc[:, 0:256], s, nl.load(r[0:128, 0:256]))
                nisa.nc_matmul(acc, s, nl.load(r[0:128, :]))
                res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nl.store(out, value=res)
                return out
            """)
        lt, r = mats
        want = lt[:128].T @ r[:128]
        want[:, :256] *= 2
        np.testing.assert_allclose(nki.simulate(mod.k)(lt, r), want, rtol=1e-4, atol=1e-4)


class TestDiagonalStationary:
    """A group whose stationaries are all diagonal (the lowering's depthwise convolution)
    is summed without the GEMM's zero products; it must read the same as the GEMM."""

    SRC = """
        @nki.jit
        def k(w, x):
            # w [taps, 128] per-channel weights, x [128, taps + 255]: out[c, j] =
            # sum_t w[t, c] * x[c, j + t], each tap a diagonal stationary
            out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            taps = w.shape[0]
            wt = nl.load(w.reshape((taps, 128)).permute((1, 0)))
            xt = nl.load(x)
            iota_t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.iota(iota_t, [[1, 128]], offset=0, channel_multiplier=-1)
            ident = nl.equal(iota_t, 0.0, dtype=nl.float32)
            acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
            for t in range(taps):
                diag = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=diag, data=ident, op0=nl.multiply,
                                   operand0=wt[0:128, t:t + 1])
                nisa.nc_matmul(acc, diag, xt[0:128, t:t + 256])
            res = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nl.store(out, value=res)
            return out
        """

    @staticmethod
    def _want(w: np.ndarray[Any, Any], x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        taps = w.shape[0]
        dense = np.zeros((128, 256), np.float32)  # the GEMM's arithmetic, tap by tap
        for t in range(taps):
            dense += np.diag(w[t]).T @ x[:, t:t + 256]
        return dense

    def test_a_depthwise_group_reads_as_the_gemm(self, nki: ModuleType,
                                                 kernel_file: Any) -> None:
        rng = np.random.default_rng(3)
        w = rng.standard_normal((5, 128), dtype=np.float32)
        x = rng.standard_normal((128, 260), dtype=np.float32)
        got = nki.simulate(kernel_file(self.SRC).k)(w, x)
        np.testing.assert_allclose(got, self._want(w, x), rtol=1e-6, atol=1e-6)

    def test_an_infinite_input_spreads_nan_as_the_gemm_does(self, nki: ModuleType,
                                                            kernel_file: Any) -> None:
        """0 * inf = NaN: one infinite input of partition 3 makes NaN in every other
        partition's output at that position, as the PE's dense product would."""
        w = np.ones((2, 128), np.float32)
        x = np.ones((128, 257), np.float32)
        x[3, 10] = np.inf
        got = nki.simulate(kernel_file(self.SRC).k)(w, x)
        assert np.isnan(np.delete(got[:, 10], 3)).all()
        assert np.isinf(got[3, 10]) and np.isfinite(got[:, 11:]).all()

    def test_only_diagonal_stationaries_take_the_short_sum(self) -> None:
        from nkibot.sim.storage import _diagonal_product

        rng = np.random.default_rng(4)
        m = rng.standard_normal((64, 40), dtype=np.float32)
        d = rng.standard_normal(64, dtype=np.float32)
        got = _diagonal_product([(np.diag(d), m), (np.diag(d), m)])
        assert got is not None
        np.testing.assert_allclose(got, 2 * (np.diag(d).T @ m), rtol=1e-6)
        off = np.diag(d)
        off[1, 0] = 1e-30
        assert _diagonal_product([(np.diag(d), m), (off, m)]) is None
        nan_off = np.diag(d)
        nan_off[0, 5] = np.nan
        assert _diagonal_product([(nan_off, m)]) is None
        assert _diagonal_product([(np.ones((64, 32), np.float32), m)]) is None  # not square
        # -0.0 products sum from +0.0, as the GEMM's do
        neg = _diagonal_product([(np.diag(np.full(64, -1.0, np.float32)),
                                  np.zeros((64, 4), np.float32))])
        assert neg is not None and not np.signbit(neg).any()


class TestDoubleRow:
    """perf_mode double_row splits K over the partitions and a first free dim of 2
    (nki/api/nki/isa/__init__.py:596-599: [128, 2, 1] x [128, 2, 3] -> [1, 3])."""

    SRC = """
        @nki.jit
        def k(a, b):
            out = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
            s = nl.load(a)
            m = nl.load(b)
            acc = nl.ndarray((a.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=s, moving=m,
                           perf_mode=nisa.matmul_perf_mode.double_row)
            res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nl.store(out, value=res)
            return out
        """

    def test_contracts_over_partitions_and_the_pair_dim(self, nki: ModuleType,
                                                        kernel_file: Any) -> None:
        import ml_dtypes
        rng = np.random.default_rng(3)
        f8 = ml_dtypes.float8_e5m2
        a = rng.integers(-3, 4, (128, 2, 1)).astype(f8)
        b = rng.integers(-3, 4, (128, 2, 3)).astype(f8)
        with activate(force=True, target="trn2") as n2:
            got = n2.simulate(kernel_file(self.SRC).k)(a, b)
        want = a.astype(np.float32).reshape(256, 1).T @ b.astype(np.float32).reshape(256, 3)
        assert got.shape == (1, 3)
        np.testing.assert_array_equal(got, want)

    def test_first_free_dim_must_be_two(self, nki: ModuleType, kernel_file: Any) -> None:
        import ml_dtypes

        from nkibot.sim import SimError
        a = np.ones((128, 4, 1), ml_dtypes.float8_e5m2)
        b = np.ones((128, 4, 3), ml_dtypes.float8_e5m2)
        with activate(force=True, target="trn2") as n2, pytest.raises(SimError) as e:
            n2.simulate(kernel_file(self.SRC).k)(a, b)
        assert e.value.rule == "shape-mismatch"
