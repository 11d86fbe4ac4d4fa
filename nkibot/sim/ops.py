"""Math on fp32 NumPy arrays: the table behind `op=` arguments and the `nl` functions.

Every engine instruction resolves its `op` (an `nl` function or a NumPy ufunc) to an
entry here and computes in float32 (int32 inputs in int64, as GpSimd does natively).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkibot.sim.errors import fail

Arr = np.ndarray[Any, Any]
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_TWO_OVER_SQRT_PI = float(2.0 / np.sqrt(np.pi))


def erf(x: Arr) -> Arr:
    """erf in float64 by its Maclaurin series, exact to far below fp32 rounding.

    NumPy has no erf and scipy is not a dependency. For |x| < 4 the series converges and
    loses at most ~5 digits of float64 to cancellation; beyond 4, erf is +-1 in float32.
    """
    x64 = np.clip(np.asarray(x, np.float64), -4.0, 4.0)
    x2 = x64 * x64
    term = x64.copy()
    total = x64.copy()
    for n in range(1, 80):
        term *= -x2 / n
        total += term / (2 * n + 1)
    return (total * _TWO_OVER_SQRT_PI).astype(np.float32)


def _sigmoid(x: Arr) -> Arr:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x: Arr) -> Arr:
    return np.logaddexp(np.float32(0.0), x)


def _gelu(x: Arr) -> Arr:
    return 0.5 * x * (1.0 + erf(x * np.float32(1.0 / np.sqrt(2.0))))


def _gelu_tanh(x: Arr) -> Arr:
    return 0.5 * x * (1.0 + np.tanh(np.float32(_SQRT_2_OVER_PI) * (x + 0.044715 * x * x * x)))


def _gelu_dx(x: Arr) -> Arr:
    pdf = np.exp(-0.5 * x * x) * np.float32(1.0 / np.sqrt(2.0 * np.pi))
    return 0.5 * (1.0 + erf(x * np.float32(1.0 / np.sqrt(2.0)))) + x * pdf


def _silu_dx(x: Arr) -> Arr:
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def _rsqrt(x: Arr) -> Arr:
    return 1.0 / np.sqrt(x)


UNARY: dict[str, Callable[[Arr], Arr]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": _rsqrt, "square": np.square,
    "reciprocal": lambda x: 1.0 / x, "abs": np.abs, "negative": np.negative,
    "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x), "gelu_dx": _gelu_dx,
    "gelu_apprx_sigmoid_dx": lambda x: _sigmoid(1.702 * x) * (1 + 1.702 * x *
                                                              (1 - _sigmoid(1.702 * x))),
    "silu": lambda x: x * _sigmoid(x), "silu_dx": _silu_dx, "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)), "erf": erf,
    "erf_dx": lambda x: _TWO_OVER_SQRT_PI * np.exp(-x * x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "sign": np.sign,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "copy": lambda x: x,
    "bypass": lambda x: x, "logical_not": lambda x: (x == 0).astype(x.dtype),
    "invert": np.invert,
}

BINARY: dict[str, Callable[[Arr, Arr], Arr]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "fmod": np.fmod,
    # nl.abs_max / abs_min: the signed input of larger / smaller magnitude, y on ties.
    "mod": np.mod,
    "abs_max": lambda a, b: np.where(np.abs(a) > np.abs(b), a, b),
    "abs_min": lambda a, b: np.where(np.abs(a) < np.abs(b), a, b),
    "equal": lambda a, b: (a == b), "not_equal": lambda a, b: (a != b),
    "less": lambda a, b: (a < b), "less_equal": lambda a, b: (a <= b),
    "greater": lambda a, b: (a > b), "greater_equal": lambda a, b: (a >= b),
    "logical_and": lambda a, b: np.logical_and(a, b),
    "logical_or": lambda a, b: np.logical_or(a, b),
    "logical_xor": lambda a, b: np.logical_xor(a, b),
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "average": lambda a, b: (a + b) * np.float32(0.5),
}
BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}
# Ops that run on the Scalar engine (activation table); the rest are Vector ALU ops.
ACTIVATIONS = set(UNARY) - {"abs", "negative", "logical_not", "invert", "bypass"}

REDUCE: dict[str, Callable[..., Arr]] = {
    "add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod,
    "logical_and": np.all, "logical_or": np.any, "bitwise_and": np.bitwise_and.reduce,
    "bitwise_or": np.bitwise_or.reduce, "bitwise_xor": np.bitwise_xor.reduce,
}

_UFUNCS: dict[Any, str] = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.maximum: "maximum", np.minimum: "minimum", np.power: "power", np.fmod: "fmod",
    np.mod: "mod", np.equal: "equal", np.not_equal: "not_equal", np.less: "less",
    np.less_equal: "less_equal", np.greater: "greater", np.greater_equal: "greater_equal",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift", np.right_shift: "right_shift", np.exp: "exp", np.log: "log",
    np.sqrt: "sqrt", np.square: "square", np.reciprocal: "reciprocal", np.abs: "abs",
    np.negative: "negative", np.tanh: "tanh", np.sin: "sin", np.cos: "cos", np.tan: "tan",
    np.arctan: "arctan", np.sign: "sign", np.floor: "floor", np.ceil: "ceil",
    np.trunc: "trunc", np.logical_not: "logical_not", np.invert: "invert",
    np.sum: "add", np.max: "maximum", np.min: "minimum", np.prod: "multiply",
}


def op_name(op: Any, what: str = "op") -> str:
    """The table name of an `op=` argument: an `nl` function or a NumPy ufunc."""
    name = getattr(op, "_nki_op", None)
    if isinstance(name, str):
        return name
    try:
        found = _UFUNCS.get(op)
    except TypeError:
        found = None
    if found is None:
        raise fail("op-illegal", f"{what}={op!r} is not an nl function or supported ufunc")
    return found


def unary(name: str) -> Callable[[Arr], Arr]:
    fn = UNARY.get(name)
    if fn is None:
        raise fail("op-illegal", f"{name} is not a unary/activation function")
    return fn


def binary(name: str) -> Callable[[Arr, Arr], Arr]:
    fn = BINARY.get(name)
    if fn is None:
        raise fail("op-illegal", f"{name} is not a binary ALU operator")
    return fn
