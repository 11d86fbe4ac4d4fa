"""`nki.isa` as the simulator provides it (installed as `sys.modules["nki.isa"]`).

Every instruction is dst-first, as in NKI 0.3+: `nisa.op(dst, ...)`, returning None.
"""

from __future__ import annotations

from typing import Any

from nkibot.sim.errors import SimError, fail
from nkibot.sim.isa.compute import (
    activation,
    activation_reduce,
    bn_aggr,
    bn_stats,
    exponential,
    reciprocal,
    tensor_reduce,
    tensor_scalar,
    tensor_tensor,
)
from nkibot.sim.isa.enums import (
    dge_mode,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from nkibot.sim.isa.move import (
    affine_select,
    dma_copy,
    iota,
    memset,
    tensor_copy,
    tensor_copy_predicated,
)
from nkibot.sim.isa.tensor import nc_matmul, nc_transpose
from nkibot.sim.issue import instrument
from nkibot.sim.state import current

__nkibot_sim__ = True

#: What the official simulator raises for hardware rules; ours is a ConstraintError.
NkiValidationError = SimError


def get_nc_version() -> nc_version:
    return {"trn1": nc_version.gen2, "trn2": nc_version.gen3}.get(current().target,
                                                                   nc_version.gen4)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise fail("unsupported", f"nisa.{name} is not implemented by the nkibot simulator")


__all__ = [
    "NkiValidationError", "activation", "activation_reduce", "affine_select", "bn_aggr",
    "bn_stats", "dge_mode", "dma_copy", "engine", "exponential", "get_nc_version",
    "gpsimd_engine", "iota", "matmul_perf_mode", "memset", "nc_matmul", "nc_transpose",
    "nc_version", "oob_mode", "reciprocal", "reduce_cmd", "scalar_engine", "tensor_copy",
    "tensor_copy_predicated", "tensor_engine", "tensor_reduce", "tensor_scalar",
    "tensor_tensor", "unknown_engine", "vector_engine",
]


# Every public instruction reports its operands to the cost model (see issue.py).
instrument(globals(), __all__)
