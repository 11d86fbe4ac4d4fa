"""The host boundary: kernel tensors are opaque to host code, results are the kernel's own.

Each case is a kernel that computes (or decides) on the host, which "works" on a naive
simulator and could never compile for a NeuronCore; each must stop with the rule and
the device instruction to use instead.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

from nkibot.sim import ConstraintError

LOAD = """
@nki.jit
def k(a):
    x = nl.load(a)
    {body}
"""

# name -> (statement using the loaded tile `x` or the input `a`, expected rule, text in message)
HOST: dict[str, tuple[str, str, str]] = {
    "np.exp on a tile": ("y = np.exp(x)", "host-compute", "nl.exp"),
    "np.add of two tiles": ("y = np.add(x, x)", "host-compute", "nl.add"),
    "array + tile": ("y = np.ones((128, 8), np.float32) + x", "host-compute", "nl.add"),
    "np.asarray of a tile": ("y = np.asarray(x)", "host-compute", "nl.load"),
    "np.asarray of an HBM input": ("y = np.asarray(a)", "host-compute", "dma_copy"),
    "__array__ called": ("y = x.__array__()", "host-compute", "nl.load"),
    "np.sum on a tile": ("y = np.sum(x)", "host-compute", "nl.sum"),
    "np.matmul on tiles": ("y = np.matmul(x, x)", "host-compute", "nc_matmul"),
    "np.max on the input": ("y = np.max(a)", "host-compute", "nl.max"),
    "bool of a tile": ("y = bool(nl.greater(x, 0.0))", "data-dependent-control", "nl.where"),
    "if on a tile": ("if x:\n        pass", "data-dependent-control", "bool()"),
    "float of a tile": ("y = float(x[0, 0])", "data-dependent-control", "float()"),
    "int of a tile": ("y = int(x[0, 0])", "data-dependent-control", "int()"),
    "index by a tile": ("y = [1, 2, 3][x[0, 0]]", "data-dependent-control", "index()"),
    "range over a tile": ("y = range(x[0, 0])", "data-dependent-control", "index()"),
}


@pytest.mark.parametrize("case", sorted(HOST))
def test_host_use_of_a_tensor_is_refused(case: str, nki: ModuleType, kernel_file: Any) -> None:
    body, rule, hint = HOST[case]
    mod = kernel_file(LOAD.format(body=body + "\n    return a"))
    with pytest.raises(ConstraintError) as info:
        nki.simulate(mod.k)(np.ones((128, 8), np.float32))
    assert info.value.rule == rule
    assert hint in str(info.value)
    assert info.value.line is not None and info.value.file is not None


def test_no_public_backing_array(nki: ModuleType) -> None:
    """Nothing a kernel can name reaches a tensor's storage: no `_arr`, no public array."""
    import nki.language as nl

    t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
    public = {n for n in dir(t) if not n.startswith("__")}
    for name in ("_arr", "_alloc", "_state", "_handle", "arr", "data", "values", "numpy"):
        assert not hasattr(t, name), name
    arrays = [n for n in public if isinstance(getattr(t, n, None), np.ndarray)]
    assert arrays == []


# name -> (kernel source, expected text in the message)
RESULTS: dict[str, tuple[str, str]] = {
    "an input": ("""
        @nki.jit
        def k(a):
            return a
        """, "not allocated by this launch"),
    "a numpy array": ("""
        @nki.jit
        def k(a):
            return np.zeros((128, 8), np.float32)
        """, "is a ndarray"),
    "an input inside a tuple": ("""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nl.load(a))
            return out, a
        """, "result[1]"),
}


@pytest.mark.parametrize("case", sorted(RESULTS))
def test_result_must_be_own_shared_hbm(case: str, nki: ModuleType, kernel_file: Any) -> None:
    source, text = RESULTS[case]
    mod = kernel_file(source)
    with pytest.raises(ConstraintError) as info:
        nki.simulate(mod.k)(np.ones((128, 8), np.float32))
    assert info.value.rule == "result-illegal"
    assert text in str(info.value)


# Official examples return nl.hbm and SBUF tensors (the scheduling guide, the
# kernel-optimization tutorial, the topk docstring); the official simulator copies every
# returned NkiTensor out (nki/guides/nki_simulator.rst:198-204), and so do we, with a note.
OWN_NON_SHARED: dict[str, str] = {
    "hbm": """
        @nki.jit
        def k(a):
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
            nisa.dma_copy(dst=out, src=t)
            return out
        """,
    "sbuf tiles in a tuple": """
        @nki.jit
        def k(a):
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=3.0)
            return t, u
        """,
}


@pytest.mark.parametrize("case", sorted(OWN_NON_SHARED))
def test_own_hbm_and_sbuf_results_are_copied_out(case: str, nki: ModuleType,
                                                 kernel_file: Any) -> None:
    from nkibot.sim import stats
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    out = nki.simulate(kernel_file(OWN_NON_SHARED[case]).k)(a)
    last = out[-1] if isinstance(out, tuple) else out
    np.testing.assert_array_equal(last, 3 * a)
    if isinstance(out, tuple):
        np.testing.assert_array_equal(out[0], a)
    notes = stats()["notes"]
    assert len(notes) == (2 if isinstance(out, tuple) else 1)
    assert "nl.shared_hbm" in notes[0] and "migration/index.rst:608" in notes[0]


def test_shared_hbm_result_has_no_note(nki: ModuleType, kernel_file: Any) -> None:
    from nkibot.sim import stats
    mod = kernel_file("""
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.load(a))
            return out
        """)
    nki.simulate(mod.k)(np.ones((128, 8), np.float32))
    assert stats()["notes"] == []


def test_honest_kernel_returns_its_output(nki: ModuleType, kernel_file: Any) -> None:
    """The boundary lets the real thing through: own shared_hbm out, values intact."""
    mod = kernel_file("""
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.exp(nl.load(a)))
            return out
        """)
    a = np.linspace(-1, 1, 128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_allclose(nki.simulate(mod.k)(a), np.exp(a), rtol=1e-6)


def test_lnc2_shared_output_is_the_launch_own(nki: ModuleType, kernel_file: Any) -> None:
    """Both logical cores allocate one shared_hbm output; it counts as the launch's own."""
    mod = kernel_file("""
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            i = nl.program_id(0)
            nl.store(out[i * 64:(i + 1) * 64, :], nl.load(a[i * 64:(i + 1) * 64, :]))
            return out
        """)
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(nki.simulate(mod.k[2])(a), a)


def test_lnc2_input_is_not_a_result(nki: ModuleType, kernel_file: Any) -> None:
    """Under LNC2 inputs are shared_hbm too, and still not the kernel's to return."""
    mod = kernel_file(RESULTS["an input"][0])
    with pytest.raises(ConstraintError, match="not allocated by this launch"):
        nki.simulate(mod.k[2])(np.ones((128, 8), np.float32))
