"""The instruction families added for the whole nki.isa API, against NumPy references.

Kernels live in conformance_isa2.py; references follow each instruction's docstring
(its NumPy-equivalent block where it has one).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import ConstraintError, activate
from tests.sim.conftest import HERE
from tests.sim.sim_helpers import load_module

F32 = np.float32


@pytest.fixture
def k2(nki: ModuleType) -> ModuleType:
    return load_module(HERE / "conformance_isa2.py", "conformance_isa2")


@pytest.fixture
def k3(kernel_backend_name: str) -> Iterator[ModuleType]:
    """The same kernels on a Trn3 (NeuronCore-v4) target, for the v4-only instructions."""
    if kernel_backend_name != "sim":
        pytest.skip("Trn3-only instructions run on the simulator's trn3 target here")
    with activate(force=True, target="trn3"):
        yield load_module(HERE / "conformance_isa2.py", "conformance_isa2_trn3")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def run(nki_mod: Any, kernel: Any, *arrays: Any) -> Any:
    return nki_mod.simulate(kernel)(*arrays)


def test_tensor_tensor_scan_is_a_linear_recurrence(nki: ModuleType, k2: ModuleType,
                                                   rng: np.random.Generator) -> None:
    a = rng.uniform(0.5, 1.0, (128, 64)).astype(F32)
    b = rng.standard_normal((128, 64), dtype=F32)
    ref = np.zeros_like(a)
    prev = np.zeros(128, F32)
    for i in range(64):
        prev = prev * a[:, i] + b[:, i]
        ref[:, i] = prev
    np.testing.assert_allclose(run(nki, k2.scan_kernel, a, b), ref, rtol=1e-5, atol=1e-5)


def test_tensor_tensor_scan_of_unit_data0_is_the_fp32_running_sum_bit_for_bit(
        nki: ModuleType, k2: ModuleType, rng: np.random.Generator) -> None:
    """data0 = 1 (a cumulative sum) gives the column-by-column fp32 loop's exact bits."""
    a = np.ones((128, 64), F32)
    b = rng.standard_normal((128, 64), dtype=F32) * F32(1e4)
    b[:, 5] = -0.0
    b[3, 7], b[4, 9], b[5, 11], b[6, 13] = np.nan, np.inf, -np.inf, 3e38
    ref = np.zeros_like(a)
    prev = np.zeros(128, F32)
    for i in range(64):
        prev = prev * a[:, i] + b[:, i]
        ref[:, i] = prev
    got = run(nki, k2.scan_kernel, a, b)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_tensor_scalar_cumulative_is_a_running_sum(nki: ModuleType, k2: ModuleType,
                                                   rng: np.random.Generator) -> None:
    a = rng.standard_normal((64, 100), dtype=F32)
    np.testing.assert_allclose(run(nki, k2.cumsum_kernel, a), np.cumsum(a * 2, axis=1),
                               rtol=1e-5, atol=1e-4)


def test_scalar_tensor_tensor_and_tensor_scalar_reduce(nki: ModuleType, k2: ModuleType,
                                                       rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((2, 128, 32), dtype=F32)
    np.testing.assert_allclose(run(nki, k2.scalar_tensor_tensor_kernel, a, b), (a - 1) * b,
                               rtol=1e-6)
    r, m = run(nki, k2.tensor_scalar_reduce_kernel, a)
    np.testing.assert_allclose(r, a + 3, rtol=1e-6)
    np.testing.assert_allclose(m, (a + 3).max(axis=1, keepdims=True), rtol=1e-6)


def test_tensor_partition_reduce_sums_over_partitions(nki: ModuleType, k2: ModuleType,
                                                      rng: np.random.Generator) -> None:
    a = rng.standard_normal((96, 40), dtype=F32)
    np.testing.assert_allclose(run(nki, k2.partition_reduce_kernel, a),
                               a.sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_select_reduce_selects_and_max_reduces(nki: ModuleType, k2: ModuleType,
                                               rng: np.random.Generator) -> None:
    pred = (rng.uniform(size=(128, 48)) > 0.5).astype(np.uint8)
    a = rng.standard_normal((128, 48), dtype=F32)
    r, m = run(nki, k2.select_reduce_kernel, pred, a)
    ref = np.where(pred != 0, a, -1.0).astype(F32)
    np.testing.assert_array_equal(r, ref)
    np.testing.assert_array_equal(m, ref.max(axis=1, keepdims=True))


def test_range_select_masks_columns_outside_the_bounds(kernel_backend_name: str,
                                                       rng: np.random.Generator) -> None:
    if kernel_backend_name != "sim":
        pytest.skip("range_select needs Trn2+; the sim runs it on its trn2 target")
    with activate(force=True, target="trn2") as nki:
        k = load_module(HERE / "conformance_isa2.py", "conformance_isa2_trn2")
        a = rng.standard_normal((64, 32), dtype=F32)
        lo = rng.integers(0, 16, (64, 1)).astype(F32)
        hi = lo + 8
        r, m = run(nki, k.range_select_kernel, a, lo, hi)
    j = np.arange(32)[None, :]
    ref = np.where((j >= lo) & (j < hi), a, np.finfo(F32).min)
    np.testing.assert_array_equal(r, ref)
    np.testing.assert_array_equal(m, ref.max(axis=1, keepdims=True))


def test_range_select_is_refused_on_trn1(nki: ModuleType, k2: ModuleType) -> None:
    """range_select: "Available only on NeuronCore-v3 and newer"."""
    ones = np.ones((8, 16), F32)
    with pytest.raises(ConstraintError, match="arch-unsupported"):
        run(nki, k2.range_select_kernel, ones, ones[:, :1], ones[:, :1])


def test_max8_find_index8_match_replace8(nki: ModuleType, k2: ModuleType,
                                         rng: np.random.Generator) -> None:
    a = rng.permutation(128 * 64).reshape(128, 64).astype(F32)
    top, idx, rep = run(nki, k2.max8_index_kernel, a)
    order = np.argsort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(top, np.take_along_axis(a, order, axis=1))
    np.testing.assert_array_equal(idx, order.astype(np.uint32))
    ref = a.copy()
    np.put_along_axis(ref, order, 0.0, axis=1)
    np.testing.assert_array_equal(rep, ref)


def test_nc_n_gather_and_stream_shuffle(nki: ModuleType, k2: ModuleType,
                                        rng: np.random.Generator) -> None:
    a = rng.standard_normal((64, 100), dtype=F32)
    idx = rng.integers(0, 100, (64, 30)).astype(np.uint32)
    np.testing.assert_array_equal(run(nki, k2.n_gather_kernel, a, idx),
                                  np.take_along_axis(a, idx.astype(np.int64), axis=1))
    b = rng.standard_normal((64, 8), dtype=F32)
    ref = b.reshape(2, 32, 8)[:, ::-1].reshape(64, 8)
    np.testing.assert_array_equal(run(nki, k2.shuffle_kernel, b), ref)


def test_dma_transpose_2d(nki: ModuleType, k2: ModuleType, rng: np.random.Generator) -> None:
    a = rng.standard_normal((16, 96), dtype=F32).astype(ml_dtypes.bfloat16)
    out = run(nki, k2.dma_transpose_kernel, a)
    np.testing.assert_array_equal(out.view(np.uint16), a.T.view(np.uint16))


def test_indirect_gather_and_scatter_add(nki: ModuleType, k2: ModuleType,
                                         rng: np.random.Generator) -> None:
    table = rng.standard_normal((200, 32), dtype=F32)
    rows = rng.permutation(200)[:64].reshape(64, 1).astype(np.int32)
    np.testing.assert_array_equal(run(nki, k2.gather_rows_kernel, table, rows),
                                  table[rows[:, 0]])
    values = rng.standard_normal((64, 32), dtype=F32)
    ref = table.copy()
    ref[rows[:, 0]] += values
    np.testing.assert_allclose(run(nki, k2.scatter_add_kernel, table, rows, values), ref,
                               rtol=1e-6)


def test_out_of_bounds_gather_index_is_refused(nki: ModuleType, k2: ModuleType) -> None:
    table = np.ones((10, 8), F32)
    rows = np.array([[0], [12]], np.int32)
    with pytest.raises(ConstraintError, match="out-of-bounds"):
        run(nki, k2.gather_rows_kernel, table, rows)


def test_scalar_offset_register_and_dynamic_select(nki: ModuleType, k2: ModuleType,
                                                   rng: np.random.Generator) -> None:
    a = rng.standard_normal((12, 40), dtype=F32)
    t, u = run(nki, k2.dynamic_row_kernel, a, np.array([[7]], np.int32))
    np.testing.assert_array_equal(t, a[7:8])
    np.testing.assert_array_equal(u, a[7:8])


def test_fori_loop_and_while_loop_on_registers(nki: ModuleType, k2: ModuleType,
                                               rng: np.random.Generator) -> None:
    a = rng.standard_normal((10, 16), dtype=F32)
    np.testing.assert_allclose(run(nki, k2.fori_sum_kernel, a, np.array([[6]], np.int32)),
                               a[:6].sum(axis=0, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(run(nki, k2.while_count_kernel, np.array([[5]], np.int32)),
                                  [[7.5]])
    np.testing.assert_array_equal(run(nki, k2.while_count_kernel, np.array([[0]], np.int32)),
                                  [[0.0]])


def test_random_numbers_are_deterministic_for_a_seed(nki: ModuleType, k2: ModuleType) -> None:
    a, b, d = run(nki, k2.rng_kernel, np.array([[42]], np.int32))
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) > 8000  # 32 random bits per element
    kept = (d == 1.0).mean()
    assert set(np.unique(d)) <= {0.0, 1.0} and 0.45 < kept < 0.55
    a2, _, d2 = run(nki, k2.rng_kernel, np.array([[42]], np.int32))
    np.testing.assert_array_equal(a2, a)
    np.testing.assert_array_equal(d2, d)
    a3, _, _ = run(nki, k2.rng_kernel, np.array([[43]], np.int32))
    assert not np.array_equal(a3, a)


def test_activate2_is_refused_before_trn3(nki: ModuleType, k2: ModuleType) -> None:
    """activate2: "Available only on NeuronCore-v4 and newer"."""
    with pytest.raises(ConstraintError, match="arch-unsupported"):
        run(nki, k2.activate2_kernel, np.ones((8, 8), F32))


def test_activate2_fuses_scale_bias_and_reduce(k3: ModuleType,
                                               rng: np.random.Generator) -> None:
    import nki as nki3

    a = rng.standard_normal((128, 64), dtype=F32)
    r, s = run(nki3, k3.activate2_kernel, a)
    ref = np.maximum(a * 2 - 1, 0)
    np.testing.assert_allclose(r, ref, rtol=1e-6)
    np.testing.assert_allclose(s, ref.sum(axis=1, keepdims=True), rtol=1e-5)


def test_mx_quantize_and_matmul_match_dequantized_numpy(k3: ModuleType,
                                                        rng: np.random.Generator) -> None:
    import nki as nki3

    a = rng.standard_normal((128, 64), dtype=F32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 256), dtype=F32).astype(ml_dtypes.bfloat16)
    out = run(nki3, k3.mx_matmul_kernel, a, b)
    ref = np.einsum("kiq,kjq->ij", a.astype(F32).reshape(128, 16, 4),
                    b.astype(F32).reshape(128, 64, 4))
    # MXFP8 e4m3 keeps 3 mantissa bits: about 6% per element, averaging out in the sum.
    assert out.shape == (16, 64)
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < 0.05, err


def test_mx_scales_of_two_tensors_pack_into_one_tile(k3: ModuleType,
                                                     rng: np.random.Generator) -> None:
    """Scale views at a partition offset inside each quadrant (mxfp-matmul.rst packing)."""
    import nki as nki3

    a = rng.standard_normal((128, 64), dtype=F32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 128), dtype=F32).astype(ml_dtypes.bfloat16)
    out = run(nki3, k3.mx_packed_scales_kernel, a, b)
    ref = np.einsum("kiq,kjq->ij", a.astype(F32).reshape(128, 16, 4),
                    b.astype(F32).reshape(128, 32, 4))
    assert np.abs(out - ref).max() / np.abs(ref).max() < 0.1  # e5m2: 2 mantissa bits
