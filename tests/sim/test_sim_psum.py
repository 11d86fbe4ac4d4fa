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
