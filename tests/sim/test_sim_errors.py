"""One negative kernel per hardware rule: the error class, rule id and kernel line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import ConstraintError, KernelError, SimError
from tests.sim.sim_helpers import line_of

F32 = np.float32


def x128(*shape: int, dtype: Any = F32) -> np.ndarray[Any, Any]:
    return np.ones(shape, dtype=dtype)


# rule -> (kernel body whose offending line ends in "# BAD", input arrays)
CASES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "partition-dim": ("""
        @nki.jit
        def k(a):
            t = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # BAD
            return a
        """, (x128(4, 4),)),
    "partition-mismatch": ("""
        @nki.jit
        def k(a):
            x = nl.load(a[0:128, :])
            y = nl.load(a[0:64, :])
            d = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=d, data1=x, data2=y, op=nl.add)  # BAD
            return a
        """, (x128(128, 8),)),
    "shape-mismatch": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            d = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=d, src=x)  # BAD
            return a
        """, (x128(128, 8),)),
    "buffer-illegal": ("""
        @nki.jit
        def k(a):
            p = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
            nisa.dma_copy(dst=a, src=p)  # BAD
            return a
        """, (x128(128, 8),)),
    "out-of-bounds": ("""
        @nki.jit
        def k(a):
            for i in nl.affine_range(2):
                t = nl.load(a[i * 128:(i + 1) * 128, :])  # BAD
            return a
        """, (x128(200, 8),)),
    "matmul-contraction": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m)  # BAD
            return a
        """, (x128(128, 64), x128(64, 32))),
    "matmul-stationary-free": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m)  # BAD
            return a
        """, (x128(128, 256), x128(128, 32))),
    "matmul-moving-free": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m)  # BAD
            return a
        """, (x128(128, 128), x128(128, 1024))),
    "psum-bank": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.ndarray((128, 2, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m)  # BAD
            return a
        """, (x128(128, 128), x128(128, 2, 256))),
    "psum-accumulate": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m, accumulate=True)  # BAD
            return a
        """, (x128(128, 128), x128(128, 64))),
    "psum-capacity": ("""
        @nki.jit
        def k(a):
            tiles = []
            for i in nl.affine_range(9):
                tiles.append(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))  # BAD
            return a
        """, (x128(4, 4),)),
    "sbuf-capacity": ("""
        @nki.jit
        def k(a):
            big = nl.ndarray((128, 40000), dtype=nl.float32, buffer=nl.sbuf)
            more = nl.ndarray((128, 10000), dtype=nl.float32, buffer=nl.sbuf)  # BAD
            return a
        """, (x128(4, 4),)),
    "dtype-illegal": ("""
        @nki.jit
        def k(a, b):
            s = nl.load(a)
            m = nl.load(b)
            p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=s, moving=m)  # BAD
            return a
        """, (x128(128, 128), x128(128, 64, dtype=ml_dtypes.bfloat16))),
    "reduce-axis0": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            s = nl.sum(x, axis=0)  # BAD
            return a
        """, (x128(128, 8),)),
    "reduce-axis": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            d = nl.ndarray((128, 1, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=d, op=nl.add, data=x, axis=1)  # BAD
            return a
        """, (x128(128, 4, 8),)),
    "broadcast": ("""
        @nki.jit
        def k(a, b):
            x = nl.load(a)
            y = nl.load(b)
            z = nl.multiply(x, y)  # BAD
            return a
        """, (x128(128, 8), x128(128, 1))),
    "read-only": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            v = x.broadcast_to((128, 8))
            nisa.memset(dst=v, value=0.0)  # BAD
            return a
        """, (x128(128, 1),)),
    "op-illegal": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            nisa.tensor_tensor(dst=x, data1=x, data2=x, op=max)  # BAD
            return a
        """, (x128(128, 8),)),
    "arch-unsupported": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            nisa.activation(dst=x, op=nl.exp, data=x, bias=1.0)  # BAD
            return a
        """, (x128(128, 8),)),
    "view-illegal": ("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = x.permute((1, 0))  # BAD
            return a
        """, (x128(128, 8),)),
}


class TestRules:
    @pytest.mark.parametrize("rule", sorted(CASES))
    def test_rule_names_rule_and_kernel_line(self, rule: str, nki: ModuleType,
                                             kernel_file: Callable[[str], ModuleType]) -> None:
        """Each broken rule raises ConstraintError naming the rule and the kernel file:line."""
        source, inputs = CASES[rule]
        mod = kernel_file(source)
        with pytest.raises(ConstraintError) as info:
            nki.simulate(mod.k)(*inputs)
        err = info.value
        line = line_of(mod, "# BAD")
        assert err.rule == rule
        assert f"[{rule}]" in str(err)
        assert f"{Path(mod.__file__ or '').name}:{line}" in str(err)
        assert (err.file, err.line) == (mod.__file__, line)
        assert err.fix

    def test_float64_input_is_refused_at_the_call(self, nki: ModuleType,
                                                  kernel_file: Callable[[str], ModuleType]) -> None:
        """float64 arrays are refused with rule float64-input, located at the caller."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                return a
            """)
        with pytest.raises(ConstraintError) as info:
            nki.simulate(mod.k)(np.ones((4, 4)))
        assert info.value.rule == "float64-input"
        assert info.value.file == __file__

    def test_memset_psum_then_default_accumulate_overwrites(self, nki: ModuleType,
                                                           kernel_file: Any) -> None:
        """accumulate=None into memset PSUM starts a new group (overwrite), never adds."""
        mod = kernel_file("""
            @nki.jit
            def k(a, b):
                out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
                p = nl.full((128, 64), 5.0, dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
                r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=r, src=p)
                nl.store(out, value=r)
                return out
            """)
        a, b = np.eye(128, dtype=F32), np.ones((128, 64), F32)
        np.testing.assert_array_equal(nki.simulate(mod.k)(a, b), b)


class TestKernelErrors:
    def test_errors_pickle_with_location(self, nki: ModuleType, kernel_file: Any) -> None:
        """Errors survive pickling (the sandbox sends them across processes) with file:line."""
        import pickle

        mod = kernel_file(CASES["partition-dim"][0])
        with pytest.raises(ConstraintError) as info:
            nki.simulate(mod.k)(x128(4, 4))
        copy = pickle.loads(pickle.dumps(info.value))
        assert type(copy) is ConstraintError
        assert (copy.rule, copy.file, copy.line, str(copy)) == (
            info.value.rule, info.value.file, info.value.line, str(info.value))

    def test_python_error_becomes_kernel_error_with_line(self, nki: ModuleType,
                                                         kernel_file: Any) -> None:
        """Any other exception in the kernel is a KernelError pointing at its line."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                x = nl.load(a)
                return x.no_such_attribute  # BAD
            """)
        with pytest.raises(KernelError) as info:
            nki.simulate(mod.k)(x128(128, 8))
        assert info.value.rule == "kernel-exception"
        assert info.value.line == line_of(mod, "# BAD")
        assert isinstance(info.value, SimError)
        assert isinstance(info.value.__cause__, AttributeError)

    def test_unknown_nl_function_is_reported_unsupported(self, nki: ModuleType,
                                                         kernel_file: Any) -> None:
        """Calling an nl function the simulator lacks names it, at the kernel line."""
        mod = kernel_file("""
            @nki.jit
            def k(a):
                return nl.no_such_function(a)  # BAD
            """)
        with pytest.raises(ConstraintError, match=r"nl\.no_such_function") as info:
            nki.simulate(mod.k)(x128(4, 4))
        assert info.value.rule == "unsupported"
        assert info.value.line == line_of(mod, "# BAD")
