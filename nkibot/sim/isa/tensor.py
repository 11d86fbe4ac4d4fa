"""Tensor Engine instructions: `nc_matmul` (with PSUM accumulation rules), `nc_transpose`."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.engines import (
    count,
    free_size,
    in_buffer,
    on_chip,
    read,
    read_native,
    storage_of,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import engine as engine_kind
from nkibot.sim.isa.enums import matmul_perf_mode
from nkibot.sim.state import PSUM_BANK_BYTES
from nkibot.sim.storage import PSUM_MATMUL, MemoryRegion, defer, pending_group, settle
from nkibot.sim.tensor import NkiTensor

_PE_DTYPES = {dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3,
              dtypes.float8_e5m2}
_F32_FAMILY = {dtypes.float32}  # tfloat32 compares equal to float32


def _check_matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor) -> None:
    op = "nc_matmul"
    in_buffer(stationary, op, "stationary", MemoryRegion.sbuf)
    in_buffer(moving, op, "moving", MemoryRegion.sbuf)
    in_buffer(dst, op, "dst", MemoryRegion.psum)
    k_s, k_m = stationary.shape[0], moving.shape[0]
    if k_s != k_m:
        raise fail("matmul-contraction", f"{op}: stationary {stationary.describe()} and moving "
                                         f"{moving.describe()} contract over {k_s} vs {k_m} "
                                         "partitions")
    m, n = free_size(stationary), free_size(moving)
    if m > 128:
        raise fail("matmul-stationary-free", f"{op}: stationary {stationary.describe()} free "
                                             f"size {m} exceeds gemm_stationary_fmax 128")
    if n > 512:
        raise fail("matmul-moving-free", f"{op}: moving {moving.describe()} free size {n} "
                                         "exceeds gemm_moving_fmax 512")
    for role, t in (("stationary", stationary), ("moving", moving)):
        if t.dtype not in _PE_DTYPES:
            raise fail("dtype-illegal", f"{op}: {role} {t.describe()} must be fp8/bf16/fp16/"
                                        "tf32/fp32")
    if (stationary.dtype in _F32_FAMILY) != (moving.dtype in _F32_FAMILY):
        raise fail("dtype-illegal", f"{op}: stationary {stationary.describe()} and moving "
                                    f"{moving.describe()}: fp32/tf32 mixes only with fp32/tf32")
    if dst.dtype != dtypes.float32:
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must be float32 on Trn1")
    if free_size(dst) * 4 > PSUM_BANK_BYTES:
        raise fail("psum-bank", f"{op}: dst {dst.describe()} needs {free_size(dst) * 4} B per "
                                "partition; a matmul result must fit one 2 KiB PSUM bank")
    if dst.shape[0] != m or free_size(dst) != n:
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} must be [{m}, {n}] for "
                                     f"stationary {stationary.describe()} and moving "
                                     f"{moving.describe()}")


def _operand(t: NkiTensor) -> np.ndarray[Any, Any]:
    a = read(t)
    return a.reshape(t.shape[0], -1)


def nc_matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor,
              is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, accumulate: bool | None = None,
              tile_position: Any = (), tile_size: Any = (),
              perf_mode: Any = matmul_perf_mode.none,
              name: Any = None) -> None:
    """dst[M, N] (PSUM, fp32) = stationary[K, M].T @ moving[K, N], K on partitions."""
    dst = on_chip(dst, "nc_matmul", "dst")
    stationary = on_chip(stationary, "nc_matmul", "stationary")
    moving = on_chip(moving, "nc_matmul", "moving")
    _check_matmul(dst, stationary, moving)
    s_arr, m_arr = _operand(stationary), _operand(moving)
    # fp32 operands are views of their SBUF tiles: pin them until the group runs.
    pins = [storage_of(t).alloc for t in (stationary, moving)
            if storage_of(t).arr.dtype == np.float32]
    issue_matmul(dst, s_arr, m_arr, accumulate, pins)


def issue_matmul(dst: NkiTensor, s_arr: np.ndarray[Any, Any], m_arr: np.ndarray[Any, Any],
                 accumulate: bool | None, pins: list[Any]) -> None:
    """`dst (+)= s_arr.T @ m_arr` under the PSUM accumulation rules (nc_matmul_mx too)."""
    h = storage_of(dst)
    if h.readonly:
        raise fail("read-only", f"nc_matmul: cannot write into broadcast view {dst.describe()}")
    state = h.state
    assert state is not None
    if accumulate is not False and pending_group(h) is not None:
        defer(h, s_arr, m_arr, False, pins)  # fast path: the region is all matmul-written
        count("tensor", dst.shape[0] * m_arr.shape[1])
        return
    overwrite = _mode(state, accumulate, dst)
    if overwrite is None:
        # Per-element inference over partly matmul-written PSUM: compute eagerly.
        settle(h.alloc)
        mask = (state == PSUM_MATMUL).reshape(dst.shape[0], -1)
        product = s_arr.T @ m_arr
        current = h.arr.reshape(mask.shape)
        np.copyto(h.arr, np.where(mask, current + product, product).reshape(dst.shape))
    else:
        defer(h, s_arr, m_arr, overwrite, pins)
    state[...] = PSUM_MATMUL
    count("tensor", dst.shape[0] * m_arr.shape[1])


def _mode(state: np.ndarray[Any, Any], accumulate: bool | None, dst: NkiTensor) -> bool | None:
    """PSUM rules: True = overwrite, False = add, None = decide per element.

    The first matmul of a group overwrites, later ones add. `accumulate=True` needs every
    element written by a matmul of the current group; `None` infers per element
    (matmul-written -> add, otherwise overwrite); `False` overwrites. A group ends when
    another engine reads the result out of PSUM.
    """
    written = state == PSUM_MATMUL
    if accumulate is None:
        if written.all():
            return False
        return None if written.any() else True
    if accumulate and not written.all():
        raise fail("psum-accumulate", f"nc_matmul: accumulate=True into {dst.describe()} "
                                      "that no matmul of this group wrote (never written, "
                                      "memset/copied, or already read out)")
    return not accumulate


def nc_transpose(dst: NkiTensor, data: NkiTensor, engine: Any = engine_kind.unknown,
                 name: Any = None) -> None:
    """Swap the partition axis and the (flattened) free axes of `data` into `dst`."""
    op = "nc_transpose"
    dst = on_chip(dst, op, "dst")
    data = on_chip(data, op, "data")
    rows, cols = data.shape[0], free_size(data)
    vector = getattr(engine, "name", None) == "vector" or ((
        engine is None or getattr(engine, "name", "") == "unknown") and (
        dst.buffer is not MemoryRegion.psum))
    limit = 32 if vector else 128
    if not vector:
        in_buffer(data, op, "data", MemoryRegion.sbuf)
        in_buffer(dst, op, "dst", MemoryRegion.psum)
    if rows > limit or cols > limit:
        raise fail("partition-dim", f"{op}: data {data.describe()} exceeds the "
                                    f"{'Vector' if vector else 'Tensor'} Engine's {limit}x{limit}")
    if dst.dtype != data.dtype:
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must have data's dtype "
                                    f"{dtypes.name(data.dtype)}")
    if dst.shape[0] != cols or free_size(dst) != rows:
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} must be [{cols}, {rows}] for "
                                     f"data {data.describe()}")
    write(dst, read_native(data).reshape(rows, cols).T, op)
    count("vector" if vector else "tensor", data.size)
