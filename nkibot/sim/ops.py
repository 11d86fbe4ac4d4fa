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


# Hart & Cheney, "Computer Approximations" (Wiley, 1968): erf on |x| < 0.5 as
# x * P(x^2) / Q(x^2), and erfc on [0.5, 10) as exp(-x^2) * P(x) / Q(x) (index 5667,
# 18.72 digits). Coefficients lowest power first.
_ERF_P = (0.804373630960840172832162e5, 0.740407142710151470082064e4,
          0.301782788536507577809226e4, 0.380140318123903008244444e2,
          0.143383842191748205576712e2, -0.288805137207594084924010e0,
          0.007547728033418631287834e0)
_ERF_Q = (0.804373630960840172826266e5, 0.342165257924628539769006e5,
          0.637960017324428279487120e4, 0.658070155459240506326937e3,
          0.380190713951939403753468e2, 1.0)
_ERFC_P = (0.18263348842295112592168999e4, 0.28980293292167655611275846e4,
           0.2320439590251635247384768711e4, 0.1143262070703886173606073338e4,
           0.3685196154710010637133875746e3, 0.7708161730368428609781633646e2,
           0.9675807882987265400604202961e1, 0.5641877825507397413087057563e0)
_ERFC_Q = (0.18263348842295112595576438e4, 0.495882756472114071495438422e4,
           0.60895424232724435504633068e4, 0.4429612803883682726711528526e4,
           0.2094384367789539593790281779e4, 0.6617361207107653469211984771e3,
           0.1371255960500622202878443578e3, 0.1714980943627607849376131193e2, 1.0)


def _horner(coeffs: tuple[float, ...], x: Arr) -> Arr:
    acc = x * coeffs[-1]
    acc += coeffs[-2]
    for c in coeffs[-3::-1]:
        acc *= x
        acc += c
    return acc


#: Elements per piece of `erf`: its float64 temporaries (six of 64 KiB) stay in cache.
_ERF_CHUNK = 8192


def _erf_piece(x: Arr, out: Arr) -> None:
    """erf of the flat fp32 piece `x` into `out`: both rational forms on every element,
    then a select, in place (no masked gathers)."""
    a = np.abs(x, dtype=np.float64)
    np.minimum(a, 10.0, out=a)  # erf is 1 in float64 long before 10; NaN stays NaN
    s2 = a * a
    small = a * _TWO_OVER_SQRT_PI
    small *= _horner(_ERF_P, s2)
    small /= _horner(_ERF_Q, s2)
    np.negative(s2, out=s2)
    large = np.exp(s2, out=s2)
    large *= _horner(_ERFC_P, a)
    large /= _horner(_ERFC_Q, a)
    np.subtract(1.0, large, out=large)
    np.copyto(large, small, where=a < 0.5)
    np.copysign(large, x, out=large)
    np.copyto(out, large, casting="same_kind")


def erf(x: Arr) -> Arr:
    """erf in float64 by Hart & Cheney's rational approximations, then rounded to fp32.

    NumPy has no erf and scipy is not a dependency. Against `math.erf` on 5M points in
    [-12, 12] every result is the correctly rounded fp32 value. Each piece of 8,192
    elements evaluates both forms and selects, in place: about 2x faster on 128x512 to
    128x8192 tiles than gathering each form's elements by a mask, with the same results
    (docs/simulator.md).
    """
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    with np.errstate(all="ignore"):
        for i in range(0, flat.size, _ERF_CHUNK):
            _erf_piece(flat[i:i + _ERF_CHUNK], out[i:i + _ERF_CHUNK])
    return out.reshape(np.shape(x))


def _sigmoid(x: Arr) -> Arr:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x: Arr) -> Arr:
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|) in the input's float type.

    NumPy's float32 logaddexp and log1p are scalar loops (about 20 ns an element here);
    log1p(y) is taken as log(u) * y / (u - 1) with u = 1 + y (exact where u - 1 is not
    0, y itself where it is), so only exp and log run, both vectorised: about 4x faster,
    and within 6 ulp of the float64 result on [-100, 100] where logaddexp was within 2
    (tests/sim/test_sim_ops.py).
    """
    x = np.asarray(x)
    if x.ndim == 0:
        return _softplus(x.reshape(1)).reshape(())
    y = np.abs(x, dtype=np.result_type(x.dtype, np.float32))
    np.negative(y, out=y)
    np.exp(y, out=y)
    u: Arr = y + 1
    d = u - 1
    np.log(u, out=u)
    u *= y
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 where u - 1 is 0
        u /= d
    np.copyto(u, y, where=d == 0)
    np.maximum(x, 0, out=d)
    u += d
    return u


def _mish(x: Arr) -> Arr:
    t = np.tanh(_softplus(x))
    t *= x
    return t


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
    "mish": _mish, "erf": erf,
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
