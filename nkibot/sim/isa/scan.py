"""Scans, cumulative and fused tensor-scalar instructions of the Vector/Scalar engines.

tensor_tensor_scan, tensor_scalar_cumulative, tensor_scalar_reduce, scalar_tensor_tensor,
tensor_partition_reduce and activate2: semantics from their nki.isa docstrings; every
one computes in fp32 and rounds on write, like the other engine instructions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.engines import (
    count,
    free_size,
    on_chip,
    read,
    require,
    same_elements,
    scalar_operand,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa import accum
from nkibot.sim.isa.enums import reduce_cmd as _cmd
from nkibot.sim.tensor import MemoryRegion, NkiTensor

Arr = np.ndarray[Any, Any]


def _arith(op: Any, what: str, opname: str) -> str:
    name = ops.op_name(op, what)
    if name in ops.BITVEC or name not in ops.BINARY:
        raise fail("op-illegal", f"{opname}: {what}={name} must be an arithmetic ALU operator")
    return name


def _not_both_psum(opname: str, a: NkiTensor, b: NkiTensor) -> None:
    if a.buffer is MemoryRegion.psum and b.buffer is MemoryRegion.psum:
        raise fail("buffer-illegal", f"{opname}: {a.describe()} and {b.describe()} cannot "
                                     "both be in PSUM")


def _apply(name: str, x: Any, operand: Any, reverse: bool) -> Any:
    fn = ops.binary(name)
    return fn(operand, x) if reverse else fn(x, operand)


def tensor_tensor_scan(dst: NkiTensor, data0: NkiTensor, data1: NkiTensor, initial: Any,
                       op0: Any, op1: Any, reverse0: bool = False, reverse1: bool = False,
                       name: Any = None) -> None:
    """result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i]) per partition."""
    opname = "tensor_tensor_scan"
    dst, data0, data1 = (on_chip(t, opname, r) for t, r in
                         ((dst, "dst"), (data0, "data0"), (data1, "data1")))
    same_elements(opname, ("dst", dst), ("data0", data0), ("data1", data1))
    _not_both_psum(opname, data0, data1)
    n0, n1 = _arith(op0, "op0", opname), _arith(op1, "op1", opname)
    parts, n = data0.shape[0], free_size(data0)
    a = read(data0).reshape(parts, n)
    b = read(data1).reshape(parts, n)
    prev = np.broadcast_to(scalar_operand(initial, data0, opname, "initial"),
                           (parts, 1)).reshape(parts).astype(np.float32)
    f0, f1 = ops.binary(n0), ops.binary(n1)
    if n0 == "multiply" and n1 in _ACCUMULATE and not reverse1 and bool(np.all(a == 1)):
        out = _accumulate(f1, prev, b)
    else:
        out = np.empty((parts, n), np.float32)
        for i in range(n):
            t = f0(prev, a[:, i]) if reverse0 else f0(a[:, i], prev)
            prev = (f1(b[:, i], t) if reverse1 else f1(t, b[:, i])).astype(np.float32)
            out[:, i] = prev
    write(dst, out, opname)
    count("vector", dst.size)


#: op1s whose ufunc `accumulate` is the scan's own loop: IEEE-exact operations, so the
#: order NumPy evaluates them in cannot change a bit (maximum/minimum's SIMD and scalar
#: loops may differ on signed zeros, so they keep the loop).
_ACCUMULATE = ("add", "subtract", "multiply")


def _accumulate(f1: Any, prev: Arr, b: Arr) -> Arr:
    """The scan when op0 is a multiply by data0 = 1 (a cumulative sum or product).

    `1 * x` is `x` exactly (NaN, inf and -0 included), so result[:, i] =
    f1(result[:, i-1], data1[:, i]) from the initial value: `f1.accumulate` over
    [initial, data1...], in fp32 and in order, as the element loop computes it (one NumPy
    call instead of one per column; the cumsum lowering's whole-row scans).
    """
    seq = np.concatenate([prev.reshape(-1, 1), b], axis=1)
    out: Arr = f1.accumulate(seq, axis=1, dtype=np.float32)
    return out[:, 1:]


_CUMULATIVE = ("add", "subtract", "multiply", "maximum", "minimum")


def tensor_scalar_cumulative(dst: NkiTensor, src: NkiTensor, op0: Any, op1: Any, imm0: Any,
                             imm1: Any = None, reduce_cmd: Any = _cmd.reset_reduce,
                             name: Any = None) -> None:
    """reg = op1(op0(src[i], imm0), reg); dst[i] = reg, along each partition."""
    opname = "tensor_scalar_cumulative"
    dst, src = on_chip(dst, opname, "dst"), on_chip(src, opname, "src")
    same_elements(opname, ("dst", dst), ("src", src))
    for t in (dst, src):
        if t.dtype in (dtypes.int32, dtypes.uint32):
            raise fail("dtype-illegal", f"{opname}: {t.describe()}: INT32/UINT32 are not "
                                        "supported as input/output dtypes")
    n0 = _arith(op0, "op0", opname)
    n1 = ops.op_name(op1, "op1")
    if n1 not in _CUMULATIVE:
        raise fail("op-illegal", f"{opname}: op1={n1} must be one of " + ", ".join(_CUMULATIVE))
    parts, n = src.shape[0], free_size(src)
    x = ops.binary(n0)(read(src), scalar_operand(imm0, src, opname, "imm0"))
    x = np.broadcast_to(x, src.shape).reshape(parts, n)
    regs = accum.registers("vector")
    if reduce_cmd is _cmd.reset_reduce:
        regs[:parts] = accum.IDENTITY[n1]
    elif reduce_cmd is _cmd.load_reduce:
        regs[:parts] = np.broadcast_to(scalar_operand(imm1, src, opname, "imm1"),
                                       (parts, 1)).reshape(parts)
    f1 = ops.binary(n1)
    out = np.empty((parts, n), np.float32)
    reg = regs[:parts].copy()
    for i in range(n):
        reg = f1(x[:, i], reg).astype(np.float32)
        out[:, i] = reg
    regs[:parts] = reg
    write(dst, out, opname)
    count("vector", dst.size)


def scalar_tensor_tensor(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any, op1: Any,
                         operand1: NkiTensor, reverse0: bool = False, reverse1: bool = False,
                         name: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1, operand0 a scalar or [P,1], operand1 a tile."""
    opname = "scalar_tensor_tensor"
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    operand1 = on_chip(operand1, opname, "operand1")
    same_elements(opname, ("dst", dst), ("data", data), ("operand1", operand1))
    _not_both_psum(opname, data, operand1)
    n0, n1 = _arith(op0, "op0", opname), _arith(op1, "op1", opname)
    t = _apply(n0, read(data), scalar_operand(operand0, data, opname, "operand0"), reverse0)
    y = _apply(n1, t, read(operand1).reshape(data.shape), reverse1)
    write(dst, y, opname)
    count("vector", dst.size)


_SCALAR_REDUCE = ("add", "multiply", "maximum", "minimum")


def tensor_scalar_reduce(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any,
                         reduce_op: Any, reduce_res: NkiTensor | None = None,
                         reverse0: bool = False, reduce_cmd: Any = _cmd.reset_reduce,
                         reduce_init: Any = None, reduce_res_negate: bool = False,
                         name: Any = None) -> None:
    """dst = data op0 operand0, and reduce_res = reduce_op over the free axes of dst."""
    opname = "tensor_scalar_reduce"
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    same_elements(opname, ("dst", dst), ("data", data))
    n0 = ops.op_name(op0, "op0")
    if n0 in ops.BITVEC:
        raise fail("op-illegal", f"{opname}: bitvec operator {n0} is not supported")
    if reduce_cmd not in (_cmd.reset_reduce, _cmd.reduce, _cmd.load_reduce):
        raise fail("unsupported", f"{opname}: reduce_cmd {reduce_cmd} is not one of "
                                  "reset_reduce, reduce, load_reduce")
    rname = accum.reduce_op_name(reduce_op, _SCALAR_REDUCE, opname)
    x = read(data)
    if n0 in ops.UNARY and n0 not in ops.BINARY:
        y = ops.unary(n0)(x)
    else:
        y = _apply(n0, x, scalar_operand(operand0, data, opname, "operand0"), reverse0)
    y = np.broadcast_to(y, data.shape)
    write(dst, y, opname)
    count("vector", dst.size)
    lanes = accum.accumulate("vector", y, rname, reduce_cmd, reduce_init)
    accum.write_result(reduce_res, lanes, data.shape[0], opname, reduce_res_negate)


_PARTITION_REDUCE: dict[str, Callable[..., Any]] = {
    "add": np.sum, "average": np.mean, "maximum": np.max,
    "bitwise_or": np.bitwise_or.reduce, "bitwise_and": np.bitwise_and.reduce}


def tensor_partition_reduce(dst: NkiTensor, op: Any, data: NkiTensor, name: Any = None) -> None:
    """Reduce across the partitions of data (GpSimd): dst is [1, free] of data's free size."""
    opname = "tensor_partition_reduce"
    dst = on_chip(dst, opname, "dst", allow_psum=False)
    data = on_chip(data, opname, "data", allow_psum=False)
    rname = ops.op_name(op)
    if rname not in _PARTITION_REDUCE:
        raise fail("op-illegal", f"{opname}: op {rname} is not one of "
                                 + ", ".join(_PARTITION_REDUCE))
    if free_size(dst) != free_size(data) or dst.shape[0] != 1:
        raise fail("shape-mismatch", f"{opname}: dst {dst.describe()} must be [1, "
                                     f"{free_size(data)}] for data {data.describe()}")
    integer = rname.startswith("bitwise")
    if integer and dtypes.is_float(data.dtype):
        raise fail("dtype-illegal", f"{opname}: {rname} needs an integer data tile")
    x = read(data, np.dtype(np.int64) if integer else np.dtype(np.float32))
    write(dst, _PARTITION_REDUCE[rname](x, axis=0), opname)
    count("gpsimd", data.size)


_ACT2_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"),
               ("add", "bypass"), ("subtract", "bypass"), ("bypass", "bypass")}
_ACT2_REDUCE = ("add", "maximum", "minimum", "abs_max", "abs_min")


def activate2(dst: NkiTensor, op: Any, data: NkiTensor, imm0: Any, imm1: Any, op0: Any,
              op1: Any, relu_param: Any = 0.0, reverse0: bool = False, reverse1: bool = False,
              reduce_op: Any = None, reduce_res: NkiTensor | None = None,
              reduce_cmd: Any = _cmd.idle, name: Any = None) -> None:
    """dst = op((data op0 imm0) op1 imm1) on the Scalar engine (NeuronCore-v4+)."""
    opname = "activate2"
    require("activate2")
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    same_elements(opname, ("dst", dst), ("data", data))
    n0, n1 = ops.op_name(op0, "op0"), ops.op_name(op1, "op1")
    if (n0, n1) not in _ACT2_PAIRS:
        raise fail("op-illegal", f"{opname}: (op0, op1) = ({n0}, {n1}) is not a supported "
                                 "pair; see the nisa.activate2 docs")
    x = read(data)
    if n0 != "bypass":
        x = _apply(n0, x, scalar_operand(imm0, data, opname, "imm0"), reverse0)
    if n1 != "bypass":
        x = _apply(n1, x, scalar_operand(imm1, data, opname, "imm1"), reverse1)
    fname = ops.op_name(op)
    if fname == "prelu":
        alpha = scalar_operand(relu_param, data, opname, "relu_param")
        y = np.where(x >= 0, x, x * alpha)
    else:
        y = ops.unary(fname)(x)
    y = np.broadcast_to(y, data.shape)
    write(dst, y, opname)
    count("scalar", dst.size)
    if reduce_op is not None and reduce_cmd is not _cmd.idle:
        rname = accum.reduce_op_name(reduce_op, _ACT2_REDUCE, opname)
        lanes = accum.accumulate("scalar", y, rname, reduce_cmd)
        accum.write_result(reduce_res, lanes, data.shape[0], opname)
    elif reduce_res is not None:
        accum.write_result(reduce_res, accum.registers("scalar")[:data.shape[0]],
                           data.shape[0], opname)
