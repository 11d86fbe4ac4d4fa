"""Attack class 4: computing the answer on the host instead of on the NeuronCore.

A kernel that reads a tensor's backing array (`x._arr`) or hands a tensor to NumPy's
array functions "verifies" on a simulator yet can never compile for the hardware. The
private attribute and every NumPy array function are refused statically; only NumPy's
dtypes, constants and ufuncs (as `op=` values) remain, and the simulator refuses those
on NKI tensors at run time (issue 12).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify.attacks.static_helpers import assert_refused, kernel

STORE = """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=result)
    return out
"""

ATTACKS = {
    "backing-array-softmax": ("@nki.jit\ndef relu_kernel(x):\n    a = x._arr\n"
                              "    e = np.exp(a - a.max(axis=1, keepdims=True))\n"
                              "    result = e / e.sum(axis=1, keepdims=True)\n" + STORE,
                              "static:underscore-attribute ._arr"),
    "private-data-attribute": ("@nki.jit\ndef relu_kernel(x):\n"
                               "    result = np.maximum(x._data, 0)\n" + STORE,
                               "static:underscore-attribute ._data"),
    "asarray": ("@nki.jit\ndef relu_kernel(x):\n    result = np.asarray(x).clip(0)\n" + STORE,
                "static:numpy-name np.asarray"),
    "array-copy": ("@nki.jit\ndef relu_kernel(x):\n    result = np.array(x, copy=True)\n"
                   + STORE, "static:numpy-name np.array"),
    "numpy-reduction": ("@nki.jit\ndef relu_kernel(x):\n    result = np.sum(x, axis=1)\n"
                        + STORE, "static:numpy-name np.sum"),
    "ufunc-method": ("@nki.jit\ndef relu_kernel(x):\n"
                     "    result = np.maximum.reduce(x, axis=1)\n" + STORE,
                     "static:numpy-name np.maximum.reduce"),
    "frombuffer": ("@nki.jit\ndef relu_kernel(x):\n"
                   "    result = np.frombuffer(memoryview(x), dtype=np.float32)\n" + STORE,
                   "static:numpy-name np.frombuffer"),
    "host-rng": ("@nki.jit\ndef relu_kernel(x):\n"
                 "    result = np.random.default_rng(0).standard_normal(x.shape)\n" + STORE,
                 "static:numpy-name np.random"),
    "values-through-repr": ("@nki.jit\ndef relu_kernel(x):\n"
                            "    text = '{0._arr}'.format(x)\n    result = text\n" + STORE,
                            "static:dynamic-access .format"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_host_computation_is_refused(name: str, tmp_path: Path) -> None:
    """Each host-side computation is refused statically and by `nkibot verify`."""
    body, reason = ATTACKS[name]
    assert_refused(kernel(body), reason, tmp_path)
