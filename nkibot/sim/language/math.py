"""`nki.language` math: elementwise, reductions, softmax, rms_norm, matmul, transpose.

Each returns a new SBUF tile (matmul/transpose: PSUM) computed in fp32 and rounded to
the result dtype: `dtype=` when given, else the promoted dtype of the tile operands.
Binary operands must have equal shapes or be scalars: the `nki` 0.4 docs define no
implicit tile broadcasting, so a [P,1] or [1,F] tile against [P,F] is refused (rule
`broadcast`) with a hint to broadcast explicitly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.alloc import OVERWRITTEN, allocate
from nkibot.sim.engines import (
    compute_dtype,
    count,
    on_chip,
    read,
    reduce_axes,
    require,
    settled,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa.tensor import nc_matmul, nc_transpose
from nkibot.sim.storage import MemoryRegion
from nkibot.sim.tensor import NkiTensor

_SCALARS = (int, float, bool, np.number, np.bool_)
_PREDICATES = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
               "logical_and", "logical_or", "logical_xor", "logical_not"}


def _result(shape: tuple[int, ...], value: Any, dtype: np.dtype[Any], engine: str,
            buffer: MemoryRegion = MemoryRegion.sbuf) -> NkiTensor:
    out = allocate(shape, dtype, buffer, fill=OVERWRITTEN)
    write(out, value, engine)
    count(engine, out.size)
    return out


def _operand(x: Any, name: str, role: str) -> Any:
    if isinstance(x, NkiTensor):
        return on_chip(x, name, role)
    if isinstance(x, _SCALARS):
        return x
    raise fail("unsupported", f"nl.{name}: '{role}' must be a tile or a scalar, got "
                              f"{type(x).__name__}")


#: nl ops whose docs apply a [P, 1] tile along the free axes of a [P, ...] tile (the
#: nl.abs_max / nl.abs_min examples); other nl binary ops need equal shapes.
_COLUMN_BROADCAST = ("abs_max", "abs_min")


def _column_operand(name: str, x: NkiTensor, y: NkiTensor) -> bool:
    return (name in _COLUMN_BROADCAST and y.shape[0] == x.shape[0] and y.size == y.shape[0]
            and x.on_chip and y.on_chip)


def binary_op(name: str, x: Any, y: Any, dtype: Any = None) -> Any:
    require(name)  # abs_max/abs_min are NeuronCore-v4 only (targets.INSTRUCTIONS)
    x, y = _operand(x, name, "x"), _operand(y, name, "y")
    fn = ops.binary(name)
    tiles = [t for t in (x, y) if isinstance(t, NkiTensor)]
    if not tiles:
        return np.asarray(fn(np.asarray(x, np.float32), np.asarray(y, np.float32))).item()
    if len(tiles) == 2 and x.shape != y.shape and not _column_operand(name, x, y):
        raise fail("broadcast", f"nl.{name}: operand shapes {x.describe()} and {y.describe()} "
                                "differ")
    cdt = compute_dtype(x, y)
    a = read(x, cdt) if isinstance(x, NkiTensor) else cdt.type(x)
    b = read(y, cdt) if isinstance(y, NkiTensor) else cdt.type(y)
    if isinstance(y, NkiTensor) and isinstance(x, NkiTensor) and y.shape != x.shape:
        b = b.reshape(y.shape[0], *([1] * (x.ndim - 1)))  # a [P, 1] column
    out_dt = tiles[0].dtype if len(tiles) == 1 else dtypes.promote(x.dtype, y.dtype)
    out_dt = out_dt if dtype is None else dtypes.normalize(dtype)
    return _result(tiles[0].shape, fn(a, b), out_dt, "vector")


def unary_op(name: str, x: Any, dtype: Any = None) -> Any:
    x = _operand(x, name, "x")
    fn = ops.unary(name)
    if not isinstance(x, NkiTensor):
        return fn(np.asarray(np.float32(x))).item()
    out_dt = x.dtype if dtype is None else dtypes.normalize(dtype)
    engine = "scalar" if name in ops.ACTIVATIONS else "vector"
    return _result(x.shape, fn(read(x, compute_dtype(x))), out_dt, engine)


def make_binary(name: str) -> Callable[..., Any]:
    def fn(x: Any, y: Any, dtype: Any = None) -> Any:
        return binary_op(name, x, y, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = name  # type: ignore[attr-defined]
    return fn


def make_unary(name: str) -> Callable[..., Any]:
    def fn(x: Any, dtype: Any = None) -> Any:
        return unary_op(name, x, dtype)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = name  # type: ignore[attr-defined]
    return fn


def reduce_op(name: str, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Any:
    x = on_chip(x, f"nl.{name}", "x")
    axes = reduce_axes(x, axis, f"nl.{name}")
    a = read(x)
    if name == "mean":
        value = np.mean(a, axis=axes, keepdims=True)
    elif name == "var":
        value = np.var(a, axis=axes, keepdims=True)
        keepdims = True  # documented: var always keeps the reduced dims
    else:
        value = ops.REDUCE[name](a, axis=axes, keepdims=True)
    shape = value.shape if keepdims else tuple(s for i, s in enumerate(x.shape) if i not in axes)
    out_dt = x.dtype if dtype is None else dtypes.normalize(dtype)
    return _result(shape if len(shape) > 1 else (x.shape[0], 1), value, out_dt, "vector")


def make_reduce(name: str, table: str) -> Callable[..., Any]:
    def fn(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Any:
        return reduce_op(table, x, axis, dtype, keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn._nki_op = table  # type: ignore[attr-defined]
    return fn


def softmax(x: Any, axis: Any = -1, dtype: Any = None) -> NkiTensor:
    x = on_chip(x, "nl.softmax", "x")
    axes = reduce_axes(x, axis, "nl.softmax")
    a = read(x)
    e = np.exp(a - np.max(a, axis=axes, keepdims=True))
    e /= np.sum(e, axis=axes, keepdims=True)
    count("vector", 2 * x.size)
    return _result(x.shape, e, x.dtype if dtype is None else dtypes.normalize(dtype), "scalar")


def rms_norm(x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
             compute_dtype: Any = None) -> NkiTensor:
    x = on_chip(x, "nl.rms_norm", "x")
    w = on_chip(w, "nl.rms_norm", "w")
    axes = reduce_axes(x, axis, "nl.rms_norm")
    a = read(x)
    ms = np.sum(a * a, axis=axes, keepdims=True) / np.float32(n)
    try:
        value = a / np.sqrt(ms + np.float32(epsilon)) * read(w)
    except ValueError:
        raise fail("broadcast", f"nl.rms_norm: weight {w.describe()} does not broadcast to "
                                f"{x.describe()}") from None
    count("vector", 2 * x.size)
    return _result(x.shape, value, x.dtype if dtype is None else dtypes.normalize(dtype),
                   "scalar")


def where(condition: Any, x: Any, y: Any, dtype: Any = None) -> NkiTensor:
    cond = on_chip(condition, "nl.where", "condition")
    vals = [_operand(v, "where", r) for v, r in ((x, "x"), (y, "y"))]
    for v in vals:
        if isinstance(v, NkiTensor) and v.shape != cond.shape:
            raise fail("broadcast", f"nl.where: {v.describe()} differs from condition "
                                    f"{cond.describe()}")
    a, b = (read(v) if isinstance(v, NkiTensor) else np.float32(v) for v in vals)
    tiles = [v for v in vals if isinstance(v, NkiTensor)]
    out_dt = tiles[0].dtype if tiles else cond.dtype
    out_dt = out_dt if dtype is None else dtypes.normalize(dtype)
    return _result(cond.shape, np.where(read(cond) != 0, a, b), out_dt, "vector")


def copy(x: Any, dtype: Any = None) -> NkiTensor:
    x = on_chip(x, "nl.copy", "x")
    return _result(x.shape, read(x, compute_dtype(x)),
                   x.dtype if dtype is None else dtypes.normalize(dtype), "vector")


copy._nki_op = "copy"  # type: ignore[attr-defined]


def broadcast_to(x: Any, shape: Any, dtype: Any = None) -> NkiTensor:
    x = on_chip(x, "nl.broadcast_to", "x")
    view = x.broadcast_to(shape)
    return _result(view.shape, read(view), x.dtype if dtype is None else dtypes.normalize(dtype),
                   "vector")


def expand_dims(x: Any, axis: int) -> NkiTensor:
    t: NkiTensor = x
    return t.reshape((*t.shape[:axis], 1, *t.shape[axis:]))


def matmul(x: Any, y: Any, transpose_x: bool = False) -> NkiTensor:
    """x @ y (or x.T @ y with transpose_x=True) on the Tensor Engine, into a PSUM tile."""
    x = on_chip(x, "nl.matmul", "x", allow_psum=False)
    if not transpose_x:
        xt = allocate((x.shape[1], x.shape[0]), x.dtype, MemoryRegion.psum)
        nc_transpose(xt, x)
        x = copy(xt)
    out = allocate((x.shape[1], y.shape[1]), dtypes.float32, MemoryRegion.psum)
    nc_matmul(out, x, y, accumulate=False)
    settled(out)
    return out


def transpose(x: Any, dtype: Any = None) -> NkiTensor:
    x = on_chip(x, "nl.transpose", "x")
    out = allocate(x.shape[::-1], x.dtype if dtype is None else dtype, MemoryRegion.psum)
    nc_transpose(out, x)
    return out
