"""Tensor Engine instructions: `nc_matmul` (with PSUM accumulation rules), `nc_transpose`."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes, targets
from nkibot.sim.engines import (
    arch_refused,
    count,
    free_size,
    in_buffer,
    on_chip,
    read,
    read_native,
    rule,
    storage_of,
    target,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import engine as engine_kind
from nkibot.sim.isa.enums import matmul_perf_mode
from nkibot.sim.state import PSUM_BANK_BYTES
from nkibot.sim.storage import (
    PSUM_MATMUL,
    PSUM_NEVER,
    MemoryRegion,
    defer,
    fill_pending,
    pending_group,
    settle,
)
from nkibot.sim.tensor import NkiTensor

_ONTO_INIT = "matmul_accumulate_onto_initialised"
_F32_FAMILY = {dtypes.float32}  # tfloat32 compares equal to float32


def _check_matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor,
                  rows: int = 1) -> None:
    """Operand rules; `rows` = 2 under perf_mode double_row (K split over partition x 2)."""
    op = "nc_matmul"
    in_buffer(stationary, op, "stationary", MemoryRegion.sbuf)
    in_buffer(moving, op, "moving", MemoryRegion.sbuf)
    in_buffer(dst, op, "dst", MemoryRegion.psum)
    k_s, k_m = stationary.shape[0], moving.shape[0]
    if k_s != k_m:
        raise fail("matmul-contraction", f"{op}: stationary {stationary.describe()} and moving "
                                         f"{moving.describe()} contract over {k_s} vs {k_m} "
                                         "partitions")
    m, n = free_size(stationary) // rows, free_size(moving) // rows
    if m > 128:
        raise fail("matmul-stationary-free", f"{op}: stationary {stationary.describe()} free "
                                             f"size {m} exceeds gemm_stationary_fmax 128")
    _check_dtypes(dst, stationary, moving)
    _check_moving_and_bank(dst, moving, n)
    if dst.shape[0] != m or free_size(dst) != n:
        raise fail("shape-mismatch", f"{op}: dst {dst.describe()} must be [{m}, {n}] for "
                                     f"stationary {stationary.describe()} and moving "
                                     f"{moving.describe()}")


def _check_dtypes(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor) -> None:
    op, t = "nc_matmul", target()
    legal = rule("matmul_operand_dtypes")
    for role, x in (("stationary", stationary), ("moving", moving)):
        if dtypes.name(x.dtype) not in legal:
            raise fail("dtype-illegal", f"{op}: {role} {x.describe()} must be one of "
                                        f"{'/'.join(legal)} on {t} "
                                        f"({targets.cite('matmul_operand_dtypes')})")
    names = {dtypes.name(stationary.dtype), dtypes.name(moving.dtype)}
    if {"float8_e4m3", "float8_e4m3fn"} <= names:
        raise fail("dtype-illegal", f"{op}: legacy float8_e4m3 and OCP float8_e4m3fn cannot "
                                    f"be mixed ({targets.cite('matmul_operand_dtypes')})")
    if (stationary.dtype in _F32_FAMILY) != (moving.dtype in _F32_FAMILY):
        raise fail("dtype-illegal", f"{op}: stationary {stationary.describe()} and moving "
                                    f"{moving.describe()}: fp32/tf32 mixes only with fp32/tf32")
    if dtypes.name(dst.dtype) not in rule("matmul_dst_dtypes"):
        raise fail("dtype-illegal", f"{op}: dst {dst.describe()} must be "
                                    f"{' or '.join(rule('matmul_dst_dtypes'))} on {t} "
                                    f"({targets.cite('matmul_dst_dtypes')})")


def _check_moving_and_bank(dst: NkiTensor, moving: NkiTensor, n: int) -> None:
    op, t = "nc_matmul", target()
    bf16 = dst.dtype == dtypes.bfloat16
    fmax = rule("matmul_moving_fmax_bf16" if bf16 else "matmul_moving_fmax_fp32")
    if n > fmax:
        raise fail("matmul-moving-free", f"{op}: moving {moving.describe()} free size {n} "
                                         f"exceeds {fmax} for a {dtypes.name(dst.dtype)} dst on "
                                         f"{t} ({targets.cite('matmul_moving_fmax_fp32')})")
    # Up to v3 a result fits one 2 KiB bank; v4's larger moving tiles span all 8 banks.
    limit = PSUM_BANK_BYTES if targets.VERSION[t] < 4 else rule("psum_partition_bytes")
    need = free_size(dst) * dst.dtype.itemsize
    if need > limit:
        raise fail("psum-bank", f"{op}: dst {dst.describe()} needs {need} B per partition; a "
                                f"matmul result must fit {limit} B of PSUM on {t}")


_FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")


def _check_perf_mode(perf_mode: Any, stationary: NkiTensor, moving: NkiTensor) -> None:
    if getattr(perf_mode, "name", "none") in ("none", "unknown"):
        return
    if not rule("matmul_perf_mode"):
        raise arch_refused("matmul_perf_mode", f"nc_matmul perf_mode={perf_mode!r}")
    for role, x in (("stationary", stationary), ("moving", moving)):
        if dtypes.name(x.dtype) not in _FP8:
            raise fail("dtype-illegal", f"nc_matmul: perf_mode double_row needs fp8 operands; "
                                        f"{role} is {x.describe()} ({targets.ISA}:582)")


def _double_rows(perf_mode: Any, stationary: NkiTensor, moving: NkiTensor) -> int:
    """2 under double_row: K is split between the partitions and a first free dim of 2.

    isa/__init__.py:596-599: "the contraction dimension of the matmul is split between
    the partition dimension and the first free dimension after the partition dimension
    ... The first free dimension must be 2", e.g. stationary [128, 2, 1] and moving
    [128, 2, 3] give a [1, 3] result.
    """
    if getattr(perf_mode, "name", "none") != "double_row":
        return 1
    for role, x in (("stationary", stationary), ("moving", moving)):
        if len(x.shape) < 3 or x.shape[1] != 2:
            raise fail("shape-mismatch", f"nc_matmul: perf_mode double_row needs {role} "
                                         f"[K, 2, ...]; got {x.describe()} ({targets.ISA}:596)")
    return 2


def _operand(t: NkiTensor, rows: int = 1) -> np.ndarray[Any, Any]:
    a = read(t)
    return a.reshape(t.shape[0] * rows, -1)


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
    _check_perf_mode(perf_mode, stationary, moving)
    rows = _double_rows(perf_mode, stationary, moving)
    _check_matmul(dst, stationary, moving, rows)
    s_arr, m_arr = _operand(stationary, rows), _operand(moving, rows)
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
        fill_pending(h.alloc)
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
        if rule(_ONTO_INIT) and not (state == PSUM_NEVER).any():
            return False  # v4: adding onto memset/copied PSUM is defined
        raise fail("psum-accumulate", f"nc_matmul: accumulate=True into {dst.describe()} "
                                      "that no matmul of this group wrote (never written, "
                                      f"memset/copied, or already read out) on {target()} "
                                      f"({targets.cite(_ONTO_INIT)})")
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
