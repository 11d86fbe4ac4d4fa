"""Launching kernels: activate(), nki.simulate, direct calls, LNC2, NaN sentinels, stats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import activate, stats

QUICKSTART = """
import ml_dtypes
import numpy as np
import nki
import nki.language as nl


@nki.jit
def add_kernel(a_ptr, b_ptr):
    a_tile = nl.load(a_ptr)
    b_tile = nl.load(b_ptr)
    total = nl.add(a_tile, b_tile)
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=total)
    return out


a = np.random.rand(128, 512).astype(np.float32)
b = np.random.rand(128, 512).astype(np.float32)
result = nki.simulate(add_kernel)(a, b)
np.testing.assert_allclose(result, a + b, rtol=1e-5)
print("quickstart ok", result.shape)
"""


class TestActivate:
    def test_sys_modules_restored_after_activate(self) -> None:
        """Leaving activate() removes our nki modules and restores what was there."""
        before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "nki"}
        with activate(force=True) as mod:
            import nki
            import nki.isa
            import nki.language

            assert nki is mod and getattr(nki, "__nkibot_sim__", False)
            assert nki.language.__nkibot_sim__ and nki.isa.__nkibot_sim__
        after = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "nki"}
        assert after == before

    def test_previous_nki_module_is_put_back(self) -> None:
        """A module already installed as `nki` is back in place after the context."""
        fake = ModuleType("nki")
        sys.modules["nki"] = fake
        try:
            with activate(force=True):
                assert sys.modules["nki"] is not fake
            assert sys.modules["nki"] is fake
        finally:
            del sys.modules["nki"]

    def test_real_nki_left_alone_unless_forced(self, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        """With a real nki importable, activate() installs nothing unless force=True."""
        (tmp_path / "nki").mkdir()
        (tmp_path / "nki" / "__init__.py").write_text("REAL = True\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        with activate() as mod:
            assert mod is None
            assert "nki" not in sys.modules or not hasattr(sys.modules["nki"], "__nkibot_sim__")
        with activate(force=True) as mod:
            assert mod is not None and mod.__nkibot_sim__
        sys.modules.pop("nki", None)

    def test_quickstart_script_runs_unchanged(self, tmp_path: Path) -> None:
        """A script written to the official simulator's quick-start API runs under activate()."""
        script = tmp_path / "quickstart.py"
        script.write_text(QUICKSTART)
        runner = ("import runpy, sys\nfrom nkibot.sim import activate\n"
                  "with activate(force=True):\n    runpy.run_path(sys.argv[1])\n")
        proc = subprocess.run([sys.executable, "-c", runner, str(script)], capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "quickstart ok (128, 512)" in proc.stdout


class TestLaunch:
    def test_direct_call_returns_tuple_of_arrays(self, nki: ModuleType, kernel_file: Any) -> None:
        """Calling a jit kernel directly runs it; a returned tuple comes back as arrays."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                x = nl.load(a)
                o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
                o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
                nl.store(o1, value=nl.exp(x))
                nl.store(o2, value=nl.negative(x))
                return o1, o2
            """)
        a = np.linspace(-1, 1, 128 * 4, dtype=np.float32).reshape(128, 4)
        o1, o2 = mod.k(a)
        assert isinstance(o1, np.ndarray)
        np.testing.assert_allclose(o1, np.exp(a), rtol=1e-6)
        np.testing.assert_array_equal(o2, -a)

    def test_kernel_writes_to_input_in_place(self, nki: ModuleType, kernel_file: Any) -> None:
        """Inputs a kernel writes are updated in the caller's array."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                t = nl.full((128, 8), 3.0, dtype=nl.float32)
                nl.store(a, value=t)
            """)
        a = np.zeros((128, 8), np.float32)
        nki.simulate(mod.k)(a)
        assert (a == 3.0).all()

    def test_uninitialised_sbuf_reads_nan_where_unwritten(self, nki: ModuleType,
                                                          kernel_file: Any) -> None:
        """Only the never-written part of an SBUF tile comes out as NaN."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
                t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[:, 0:40], src=a[:, 0:40])
                nisa.dma_copy(dst=out, src=t)
                return out
            """)
        got = nki.simulate(mod.k)(np.ones((128, 64), np.float32))
        assert np.isnan(got[:, 40:]).all()
        assert (got[:, :40] == 1).all()

    def test_integer_allocations_hold_four(self, nki: ModuleType, kernel_file: Any) -> None:
        """New integer tensors are filled with 4, the official sentinel."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                return nl.ndarray((3, 5), dtype=nl.int32, buffer=nl.shared_hbm)
            """)
        got = nki.simulate(mod.k)(np.ones((1, 1), np.float32))
        assert got.dtype == np.int32 and (got == 4).all()

    def test_lnc2_program_ids(self, nki: ModuleType, kernel_file: Any) -> None:
        """kernel[2] runs programs 0 and 1 with num_programs 2, sharing the output."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                out = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.shared_hbm)
                pid = nl.program_id(0)
                t = nl.full((1, 4), pid * 10 + nl.num_programs(0), dtype=nl.float32)
                nl.store(out[pid:pid + 1, :], value=t)
                return out
            """)
        got = mod.k[2](np.ones((1, 1), np.float32))
        np.testing.assert_array_equal(got, [[2] * 4, [12] * 4])

    def test_psum_reused_across_output_tiles(self, nki: ModuleType, kernel_file: Any) -> None:
        """A PSUM tile hoisted out of the loops starts a new group after being read out."""
        mod = kernel_file("""
            @nki.jit
            def k(lt, r):
                out = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.shared_hbm)
                acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
                for m in nl.affine_range(2):
                    for kk in nl.affine_range(2):
                        s = nl.load(lt[kk * 128:(kk + 1) * 128, m * 128:(m + 1) * 128])
                        nisa.nc_matmul(acc, s, nl.load(r[kk * 128:(kk + 1) * 128, :]))
                    res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=acc)
                    nl.store(out[m * 128:(m + 1) * 128, :], value=res)
                return out
            """)
        rng = np.random.default_rng(0)
        lt = rng.standard_normal((256, 256), dtype=np.float32)
        r = rng.standard_normal((256, 64), dtype=np.float32)
        np.testing.assert_allclose(nki.simulate(mod.k)(lt, r), lt.T @ r, rtol=1e-4, atol=1e-4)

    def test_matmul_into_strided_psum_view(self, nki: ModuleType, kernel_file: Any) -> None:
        """A matmul into a non-contiguous 3-D PSUM view writes through to the tile."""
        mod = kernel_file("""
            @nki.jit
            def k(a, b):
                out = nl.ndarray((128, 2, 128), dtype=nl.float32, buffer=nl.shared_hbm)
                p = nl.ndarray((128, 4, 256), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=p[:, 1:3, 0:128], stationary=nl.load(a), moving=nl.load(b))
                r = nl.ndarray((128, 2, 128), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=r, src=p[:, 1:3, 0:128])
                nl.store(out, value=r)
                return out
            """)
        b = np.random.default_rng(0).standard_normal((128, 2, 128), dtype=np.float32)
        got = nki.simulate(mod.k)(np.eye(128, dtype=np.float32), b)
        np.testing.assert_allclose(got, b, rtol=1e-6)

    def test_loop_allocations_recycle(self, nki: ModuleType, kernel_file: Any) -> None:
        """Tiles allocated in a loop body are freed each iteration: no capacity error."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
                for i in nl.affine_range(64):
                    t = nl.load(a)
                    u = nl.exp(t)
                    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                    nl.store(out, value=nl.add(t, u))
                return out
            """)
        nki.simulate(mod.k)(np.zeros((128, 12000), np.float32))
        assert stats()["peak_sbuf_bytes_per_partition"] <= 192 * 1024

    def test_device_print_writes_stdout(self, nki: ModuleType, kernel_file: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        """nl.device_print prints the prefix and the tile's values."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                nl.device_print("tile:", nl.load(a))
            """)
        nki.simulate(mod.k)(np.full((1, 3), 7, np.float32))
        assert "tile: [[7. 7. 7.]]" in capsys.readouterr().out


class TestStats:
    def test_stats_count_engines_and_dma_bytes(self, ck: ModuleType, nki: ModuleType) -> None:
        """A 2x2-tile add counts 12 DMAs, 4 vector ops and the bytes moved, as JSON."""
        a = np.ones((256, 1024), np.float32)
        nki.simulate(ck.tiled_add)(a, a)
        s = json.loads(json.dumps(stats()))
        assert s["instructions"] == {"tensor": 0, "vector": 4, "scalar": 0, "gpsimd": 0,
                                     "dma": 12}
        assert s["elements"]["vector"] == 256 * 1024
        assert s["dma_bytes"] == 3 * 256 * 1024 * 4

    def test_stats_count_matmuls(self, ck: ModuleType, nki: ModuleType) -> None:
        """Each nc_matmul is one Tensor Engine instruction of M*N output elements."""
        nki.simulate(ck.matmul)(np.ones((256, 128), np.float32), np.ones((256, 512), np.float32))
        s = stats()
        assert s["instructions"]["tensor"] == 2
        assert s["elements"]["tensor"] == 2 * 128 * 512
        assert s["peak_psum_bytes_per_partition"] == 2048


    def test_module_docstring_documents_stats(self) -> None:
        """The package docstring documents stats() keys for the profiling code."""
        import nkibot.sim as sim

        assert "dma_bytes" in (sim.__doc__ or "") and "stats()" in (sim.__doc__ or "")


class TestPreciseFp:
    """NKI_PRECISE_FP (nki/guides/nki_simulator.rst:123-136): 1 (default) stores bfloat16 /
    float8 tiles rounded; 0 stores every low-precision tensor as float32."""

    SRC = """
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.activation(dst=y, op=nl.square, data=x, scale=3.0)
            z = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=z, src=y)
            out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=z)
            return out
        """

    def _run(self, nki: ModuleType, kernel_file: Any) -> Any:
        a = np.linspace(1.0, 97.0, 128 * 8, dtype=np.float32).reshape(128, 8) + 0.013
        return a, nki.simulate(kernel_file(self.SRC).k)(a)

    def test_default_rounds_bf16(self, nki: ModuleType, kernel_file: Any,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("NKI_PRECISE_FP", raising=False)
        a, got = self._run(nki, kernel_file)
        want = np.square(a * 3.0)
        assert not np.allclose(got, want, rtol=1e-5)  # bf16 keeps 8 mantissa bits
        np.testing.assert_array_equal(got, want.astype(ml_dtypes.bfloat16).astype(np.float32))

    def test_zero_keeps_float32(self, nki: ModuleType, kernel_file: Any,
                                monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NKI_PRECISE_FP", "0")
        a, got = self._run(nki, kernel_file)
        np.testing.assert_allclose(got, np.square(a * 3.0), rtol=1e-6)

    def test_zero_refuses_bit_views_of_widened_tiles(self, nki: ModuleType, kernel_file: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        from nkibot.sim import SimError
        monkeypatch.setenv("NKI_PRECISE_FP", "0")
        mod = kernel_file("""
            @nki.jit
            def k(a):
                y = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
                v = y.view(nl.int16)
                return a
            """)
        with pytest.raises(SimError) as e:
            nki.simulate(mod.k)(np.zeros((128, 8), np.float32))
        assert e.value.rule == "unsupported"


class TestSpmdGrid:
    """`kernel[4, 2]`: one program per grid point, nl.program_id(axis) / num_programs /
    program_ndim as the nki.language stubs document them (language/__init__.py:2595-2614)."""

    SRC = """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            i = nl.program_id(0)
            j = nl.program_id(1)
            t = nl.load(a[i, j])
            nl.store(out[i, j], value=nl.add(t, float(nl.num_programs(1) * 100 * i + j
                                                    + 1000 * nl.program_ndim())))
            return out
        """

    def test_every_program_writes_its_cell(self, nki: ModuleType, kernel_file: Any) -> None:
        a = np.arange(4 * 3 * 2 * 8, dtype=np.float32).reshape(4, 3, 2, 8)
        got = nki.simulate(kernel_file(self.SRC).k[4, 3])(a)
        i, j = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
        want = a + (300 * i + j + 2000)[:, :, None, None]
        np.testing.assert_array_equal(got, want)

    def test_axis_outside_the_grid_is_refused(self, nki: ModuleType, kernel_file: Any) -> None:
        from nkibot.sim import SimError
        mod = kernel_file("""
            @nki.jit
            def k(a):
                return nl.program_id(2)
            """)
        with pytest.raises(SimError) as e:
            nki.simulate(mod.k[2, 2])(np.zeros((2, 2), np.float32))
        assert e.value.rule == "out-of-bounds"

    def test_no_grid_is_program_zero_of_none(self, nki: ModuleType, kernel_file: Any) -> None:
        mod = kernel_file("""
            @nki.jit
            def k(a):
                out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
                t = nl.load(a)
                nl.store(out, value=nl.add(t, float(nl.program_id(0) + 10 * nl.program_ndim()
                                                    + 100 * nl.num_programs())))
                return out
            """)
        got = nki.simulate(mod.k)(np.zeros((2, 4), np.float32))
        np.testing.assert_array_equal(got, np.full((2, 4), 100.0, np.float32))
