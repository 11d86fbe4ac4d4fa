"""`nki.isa` Vector/Scalar/GpSimd compute instructions, all dst-first, fp32 inside."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.engines import (
    arch_refused,
    compute_dtype,
    count,
    free_size,
    on_chip,
    read,
    reduce_axes,
    require,
    rule,
    same_elements,
    scalar_operand,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import engine as _engine
from nkibot.sim.isa.enums import reduce_cmd as _cmd
from nkibot.sim.state import current
from nkibot.sim.storage import MemoryRegion
from nkibot.sim.tensor import NkiTensor

Arr = np.ndarray[Any, Any]


def _int_only(name: str, *ts: NkiTensor) -> None:
    if name in ops.BITVEC and any(dtypes.is_float(t.dtype) for t in ts):
        raise fail("dtype-illegal", f"bitvec op {name} needs integer operands, got "
                                    + ", ".join(t.describe() for t in ts))


def tensor_tensor(dst: NkiTensor, data1: NkiTensor, data2: NkiTensor, op: Any,
                  engine: Any = _engine.unknown, name: Any = None) -> None:
    opname = "tensor_tensor"
    dst, data1, data2 = (on_chip(t, opname, r) for t, r in
                         ((dst, "dst"), (data1, "data1"), (data2, "data2")))
    same_elements(opname, ("dst", dst), ("data1", data1), ("data2", data2))
    if data1.buffer is MemoryRegion.psum and data2.buffer is MemoryRegion.psum:
        raise fail("buffer-illegal", f"{opname}: data1 {data1.describe()} and data2 "
                                     f"{data2.describe()} cannot both be in PSUM")
    name_ = ops.op_name(op)
    _int_only(name_, dst, data1, data2)
    gpsimd = name_ == "power" or engine is _engine.gpsimd
    if gpsimd and MemoryRegion.psum in (dst.buffer, data1.buffer, data2.buffer):
        raise fail("buffer-illegal", f"{opname}: op {name_} runs on GpSimd, which cannot "
                                     "access PSUM")
    cdt = compute_dtype(data1, data2)
    a, b = read(data1, cdt), read(data2, cdt)
    if data2.shape != data1.shape:
        b = b.reshape(data1.shape)
    write(dst, ops.binary(name_)(a, b), opname)
    count("gpsimd" if gpsimd else "vector", dst.size)


def _apply(name: str, x: Arr, operand: Any, reverse: bool) -> Arr:
    if name in ops.UNARY and name not in ops.BINARY:
        return ops.unary(name)(x)
    fn = ops.binary(name)
    return fn(operand, x) if reverse else fn(x, operand)


def tensor_scalar(dst: NkiTensor, data: NkiTensor, op0: Any, operand0: Any,
                  reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, engine: Any = _engine.unknown,
                  name: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1; operands are scalars or [P,1] tiles."""
    opname = "tensor_scalar"
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    same_elements(opname, ("dst", dst), ("data", data))
    n0 = ops.op_name(op0, "op0")
    _int_only(n0, dst, data)
    x = _apply(n0, read(data), scalar_operand(0 if operand0 is None else operand0, data,
                                          opname, "operand0"),
               reverse0)
    if op1 is not None:
        n1 = ops.op_name(op1, "op1")
        x = _apply(n1, x, scalar_operand(0 if operand1 is None else operand1, data, opname,
                                         "operand1"), reverse1)
    write(dst, x, opname)
    eng = "vector" if engine in (None, _engine.unknown) else engine.value
    count(eng, dst.size)


def activation(dst: NkiTensor, op: Any, data: NkiTensor, bias: Any = None, scale: Any = 1.0,
               reduce_op: Any = None, reduce_res: NkiTensor | None = None,
               reduce_cmd: Any = _cmd.idle, name: Any = None) -> None:
    """dst = op(data * scale + bias) on the Scalar engine, with an optional add-reduction."""
    opname = "activation"
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    same_elements(opname, ("dst", dst), ("data", data))
    fn = ops.unary(ops.op_name(op))
    x = read(data)
    if isinstance(scale, NkiTensor) or scale != 1.0:
        x = x * scalar_operand(scale, data, opname, "scale")
    if bias is not None:
        if not isinstance(bias, NkiTensor) and not rule("activation_scalar_bias"):
            raise arch_refused("activation_scalar_bias",
                               f"{opname}: a scalar bias={bias!r} (pass a [P,1] tile)")
        x = x + scalar_operand(bias, data, opname, "bias")
    y = fn(x)
    write(dst, y, opname)
    count("scalar", dst.size)
    if reduce_op is not None or reduce_res is not None:
        _reduce_regs("scalar", y, data, reduce_op, reduce_res, reduce_cmd, opname)


_REG_OPS = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}


def _reduce_regs(eng: str, y: Arr, data: NkiTensor, reduce_op: Any, reduce_res: Any,
                 cmd: Any, opname: str) -> None:
    op = "add" if reduce_op is None else ops.op_name(reduce_op, "reduce_op")
    legal = rule("activation_reduce_ops")
    if legal is not None and op not in legal:
        raise arch_refused("activation_reduce_ops", f"{opname}: reduce_op={reduce_op!r}")
    if op not in _REG_OPS:
        raise fail("op-illegal", f"{opname}: reduce_op must be nl.add, nl.maximum or nl.minimum")
    ufunc = _REG_OPS[op]
    regs = current().regs.setdefault(eng, np.zeros(128, np.float32))
    parts = data.shape[0]
    if cmd is _cmd.idle and reduce_op is not None:
        cmd = _cmd.reset_reduce  # a reduce_op without a command reduces this instruction
    reduced = ufunc.reduce(y.reshape(parts, -1), axis=1, dtype=np.float32)
    if cmd in (_cmd.reset, _cmd.reset_reduce):
        regs[:parts] = 0
    if cmd is _cmd.reset_reduce:
        regs[:parts] = reduced
    elif cmd in (_cmd.reduce, _cmd.load_reduce):
        regs[:parts] = ufunc(regs[:parts], reduced)
    if reduce_res is not None:
        res = on_chip(reduce_res, opname, "reduce_res")
        if res.shape[0] != parts or free_size(res) != 1:
            raise fail("shape-mismatch", f"{opname}: reduce_res {res.describe()} must be "
                                         f"[{parts}, 1]")
        write(res, regs[:parts], opname)


def activation_reduce(dst: NkiTensor, op: Any, data: NkiTensor, reduce_op: Any,
                      reduce_res: NkiTensor, bias: Any = None, scale: Any = 1.0,
                      name: Any = None) -> None:
    activation(dst, op, data, bias, scale, reduce_op, reduce_res, _cmd.reset_reduce)


def tensor_reduce(dst: NkiTensor, op: Any, data: NkiTensor, axis: Any, negate: bool = False,
                  keepdims: bool = False, name: Any = None) -> None:
    """Reduce the last free axes of data (never the partition axis) into dst."""
    opname = "tensor_reduce"
    dst, data = on_chip(dst, opname, "dst"), on_chip(data, opname, "data")
    axes = reduce_axes(data, axis, opname)
    name_ = ops.op_name(op)
    if name_ not in ops.REDUCE:
        raise fail("op-illegal", f"{opname}: {name_} is not a reduction operator")
    _int_only(name_, dst, data)
    value = ops.REDUCE[name_](read(data, compute_dtype(data)), axis=axes, keepdims=True)
    if negate:
        value = -value
    kept = value.size // data.shape[0]
    if dst.shape[0] != data.shape[0] or free_size(dst) != kept:
        raise fail("shape-mismatch", f"{opname}: dst {dst.describe()} must hold {kept} element(s) "
                                     f"per partition for data {data.describe()} axis={axis!r}")
    write(dst, value, opname)
    count("vector", data.size)


def reciprocal(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    dst, data = on_chip(dst, "reciprocal", "dst"), on_chip(data, "reciprocal", "data")
    same_elements("reciprocal", ("dst", dst), ("data", data))
    write(dst, np.float32(1.0) / read(data), "reciprocal")
    count("vector", dst.size)


def exponential(dst: NkiTensor, src: NkiTensor, max_value: Any = 0.0, reduce_res: Any = None,
                reduce_cmd: Any = _cmd.idle, reduce_init: Any = 0.0, name: Any = None) -> None:
    require("exponential")
    dst, src = on_chip(dst, "exponential", "dst"), on_chip(src, "exponential", "src")
    same_elements("exponential", ("dst", dst), ("src", src))
    y = np.exp(read(src) - scalar_operand(max_value, src, "exponential", "max_value"))
    write(dst, y, "exponential")
    count("vector", dst.size)
    if reduce_cmd is not _cmd.idle or reduce_res is not None:
        regs = current().regs.setdefault("vector", np.zeros(128, np.float32))
        if reduce_cmd is _cmd.load_reduce:
            regs[: src.shape[0]] = np.float32(reduce_init)
        elif reduce_cmd is _cmd.reset_reduce:
            regs[: src.shape[0]] = 0
        _reduce_regs("vector", y, src, None, reduce_res, _cmd.reduce, "exponential")


def bn_stats(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """Per partition: (count, mean, var*count) of even then odd free elements."""
    dst, data = on_chip(dst, "bn_stats", "dst"), on_chip(data, "bn_stats", "data")
    n = free_size(data)
    if n > 512:
        raise fail("shape-mismatch", f"bn_stats: data {data.describe()} has {n} elements per "
                                     "partition; bn_stats_fmax is 512")
    if dst.shape[0] != data.shape[0] or free_size(dst) != 6:
        raise fail("shape-mismatch", f"bn_stats: dst {dst.describe()} must be [{data.shape[0]}, 6]")
    x = read(data).reshape(data.shape[0], n)
    cols = []
    for half in (x[:, 0::2], x[:, 1::2]):
        c = half.shape[1]
        mean = half.mean(axis=1) if c else np.zeros(x.shape[0], np.float32)
        m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if c else mean
        cols += [np.full(x.shape[0], c, np.float32), mean, m2]
    write(dst, np.stack(cols, axis=1), "bn_stats")
    count("vector", data.size)


def bn_aggr(dst: NkiTensor, data: NkiTensor, name: Any = None) -> None:
    """Combine (count, mean, var*count) triples into mean and variance per partition."""
    dst, data = on_chip(dst, "bn_aggr", "dst"), on_chip(data, "bn_aggr", "data")
    n = free_size(data)
    if n % 3 or dst.shape[0] != data.shape[0] or free_size(dst) != 2:
        raise fail("shape-mismatch", f"bn_aggr: data {data.describe()} needs a multiple of 3 "
                                     f"elements and dst {dst.describe()} 2 per partition")
    t = read(data).reshape(data.shape[0], n // 3, 3)
    counts, means, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = counts.sum(axis=1)
    mean = (counts * means).sum(axis=1) / total
    var = (m2.sum(axis=1) + (counts * (means - mean[:, None]) ** 2).sum(axis=1)) / total
    write(dst, np.stack([mean, var], axis=1), "bn_aggr")
    count("vector", data.size)
