"""`nki.isa` as the simulator provides it (installed as `sys.modules["nki.isa"]`).

Every instruction is dst-first, as in NKI 0.3+: `nisa.op(dst, ...)`, returning None.
"""

from __future__ import annotations

from typing import Any

from nkibot.sim import targets
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
    dma_engine,
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
from nkibot.sim.isa.gather import (
    dma_compute,
    dma_transpose,
    local_gather,
    nc_n_gather,
    nc_stream_shuffle,
)
from nkibot.sim.isa.move import (
    affine_select,
    dma_copy,
    iota,
    memset,
    tensor_copy,
    tensor_copy_predicated,
)
from nkibot.sim.isa.mx import nc_matmul_mx, quantize_mx
from nkibot.sim.isa.registers import (
    VirtualRegister,
    core_barrier,
    register_alloc,
    register_load,
    register_move,
    register_store,
    sendrecv,
)
from nkibot.sim.isa.rng import dropout, rand2, rand_get_state, rand_set_state, rng, set_rng_seed
from nkibot.sim.isa.scan import (
    activate2,
    scalar_tensor_tensor,
    tensor_partition_reduce,
    tensor_scalar_cumulative,
    tensor_scalar_reduce,
    tensor_tensor_scan,
)
from nkibot.sim.isa.select import (
    max8,
    nc_find_index8,
    nc_match_replace8,
    nonzero_with_count,
    range_select,
    select_reduce,
    sequence_bounds,
    topk,
)
from nkibot.sim.isa.tensor import nc_matmul, nc_transpose
from nkibot.sim.language.objects import NKIObject
from nkibot.sim.state import current

__nkibot_sim__ = True

#: What the official simulator raises for hardware rules; ours is a ConstraintError.
NkiValidationError = SimError


class NkiInstruction(NKIObject):
    """What an instruction call returns in NKI; the simulator's instructions return None."""


def get_nc_sub_version() -> int:
    """The silicon revision within the generation: 0, the first (all the simulator models)."""
    return 0


def get_nc_version() -> nc_version:
    return {2: nc_version.gen2, 3: nc_version.gen3}.get(targets.VERSION[current().target],
                                                         nc_version.gen4)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise fail("unsupported", f"nisa.{name} is not implemented by the nkibot simulator")


__all__ = [
    "NkiInstruction", "NkiValidationError", "VirtualRegister", "activate2", "activation",
    "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "core_barrier", "dge_mode",
    "dma_compute", "dma_copy", "dma_engine", "dma_transpose", "dropout", "engine",
    "exponential", "get_nc_sub_version", "get_nc_version", "gpsimd_engine", "iota",
    "local_gather", "matmul_perf_mode", "max8", "memset", "nc_find_index8",
    "nc_match_replace8", "nc_matmul", "nc_matmul_mx", "nc_n_gather", "nc_stream_shuffle",
    "nc_transpose", "nc_version", "nonzero_with_count", "oob_mode", "quantize_mx", "rand2",
    "rand_get_state", "rand_set_state", "range_select", "reciprocal", "reduce_cmd",
    "register_alloc", "register_load", "register_move", "register_store", "rng",
    "scalar_engine", "scalar_tensor_tensor", "select_reduce", "sendrecv", "sequence_bounds",
    "set_rng_seed", "tensor_copy", "tensor_copy_predicated", "tensor_engine",
    "tensor_partition_reduce", "tensor_reduce", "tensor_scalar", "tensor_scalar_cumulative",
    "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan", "topk", "unknown_engine",
    "vector_engine",
]
