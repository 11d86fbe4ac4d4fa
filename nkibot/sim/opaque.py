"""The host boundary: NKI tensors are opaque to host code, as they are on a NeuronCore.

On hardware a kernel's tensors live in HBM, SBUF and PSUM; the Python that traces the
kernel never sees their values. So here NumPy applied to a tensor (`np.exp(t)`,
`np.asarray(t)`, `t.__array__()`) and Python reading its values (`bool(t)`, `float(t)`,
`int(t)`, `range(t)`) are refused with the `nl`/`nisa` instruction that does the job on
device. Without this a kernel could compute on the host and still "verify" on the
simulator, then never compile for a NeuronCore.
"""

from __future__ import annotations

from typing import Any

from nkibot.sim.errors import ConstraintError, fail
from nkibot.sim.ops import _UFUNCS, ACTIVATIONS

#: NumPy functions (by name) whose device counterpart is not simply `nl.<same name>`.
_FUNCTIONS: dict[str, str] = {
    "asarray": "nl.load / nisa.dma_copy into an SBUF tile, then nl/nisa instructions",
    "array": "nl.load / nisa.dma_copy into an SBUF tile, then nl/nisa instructions",
    "asanyarray": "nl.load / nisa.dma_copy into an SBUF tile, then nl/nisa instructions",
    "copy": "nl.copy or nisa.tensor_copy (on chip), nisa.dma_copy (HBM)",
    "copyto": "nisa.tensor_copy or nisa.dma_copy",
    "sum": "nl.sum or nisa.tensor_reduce(op=nl.add)",
    "max": "nl.max or nisa.tensor_reduce(op=nl.maximum)",
    "amax": "nl.max or nisa.tensor_reduce(op=nl.maximum)",
    "min": "nl.min or nisa.tensor_reduce(op=nl.minimum)",
    "amin": "nl.min or nisa.tensor_reduce(op=nl.minimum)",
    "mean": "nl.mean", "var": "nl.var", "prod": "nl.prod", "all": "nl.all",
    "matmul": "nl.matmul or nisa.nc_matmul", "dot": "nl.matmul or nisa.nc_matmul",
    "einsum": "nisa.nc_matmul", "transpose": "nl.transpose or nisa.nc_transpose",
    "where": "nl.where or nisa.tensor_copy_predicated", "reshape": "tensor.reshape(shape)",
    "concatenate": "writes into slices of one nl.ndarray",
    "stack": "writes into slices of one nl.ndarray",
    "zeros_like": "nl.zeros_like", "empty_like": "nl.empty_like", "full_like": "nl.full",
}


def device_op(name: str) -> str:
    """The instruction to use instead of the NumPy function or ufunc called `name`."""
    if name in _FUNCTIONS:
        return _FUNCTIONS[name]
    nl_name = next((v for k, v in _UFUNCS.items() if getattr(k, "__name__", "") == name), None)
    if nl_name is None:
        return "the nl/nisa instruction that computes it on device"
    if nl_name in ACTIVATIONS:
        return f"nl.{nl_name} or nisa.activation(op=nl.{nl_name})"
    return f"nl.{nl_name} or nisa.tensor_tensor/tensor_scalar(op=nl.{nl_name})"


def numpy_refused(what: str, name: str, describe: str) -> ConstraintError:
    """NumPy applied to an NKI tensor: refused, with the device instruction to use."""
    return fail("host-compute", f"{what} {name} applied to NKI tensor {describe}: kernel "
                                "tensors have no host values; use " + device_op(name))


def values_refused(conversion: str, describe: str) -> ConstraintError:
    """Python reading a tensor's values (data-dependent control flow): refused."""
    return fail("data-dependent-control",
                f"{conversion}() of NKI tensor {describe}: a kernel's Python cannot read "
                "tensor values (no data-dependent control flow on a NeuronCore); use "
                "nl.where / nisa.tensor_copy_predicated / nisa.affine_select for a choice per "
                "element, and Python ints for loop bounds and indices")


def ufunc_name(ufunc: Any) -> str:
    return str(getattr(ufunc, "__name__", ufunc))
