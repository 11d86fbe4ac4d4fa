"""`nki.language` as the simulator provides it (installed as `sys.modules["nki.language"]`)."""

from __future__ import annotations

from typing import Any

from nkibot.sim.dtypes import (
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from nkibot.sim.errors import fail
from nkibot.sim.language.core import (
    affine_range,
    device_print,
    ds,
    dynamic_range,
    empty_like,
    full,
    hbm,
    is_hbm,
    is_on_chip,
    is_psum,
    is_sbuf,
    load,
    load_transpose2d,
    ndarray,
    no_reorder,
    num_programs,
    ones,
    private_hbm,
    program_id,
    program_ndim,
    psum,
    sbuf,
    sequential_range,
    shared_constant,
    shared_hbm,
    shared_identity_matrix,
    static_range,
    store,
    tile_size,
    zeros,
    zeros_like,
)
from nkibot.sim.language.extra import (
    average,
    dropout,
    fori_loop,
    gather_flattened,
    prelu,
    rand,
    random_seed,
    while_loop,
)
from nkibot.sim.language.math import (
    broadcast_to,
    copy,
    expand_dims,
    make_binary,
    make_reduce,
    make_unary,
    matmul,
    rms_norm,
    softmax,
    transpose,
    where,
)
from nkibot.sim.language.objects import NKIObject
from nkibot.sim.storage import MemoryRegion
from nkibot.sim.tensor import NkiTensor

__nkibot_sim__ = True

add = make_binary("add")
subtract = make_binary("subtract")
multiply = make_binary("multiply")
divide = make_binary("divide")
maximum = make_binary("maximum")
minimum = make_binary("minimum")
power = make_binary("power")
fmod = make_binary("fmod")
mod = make_binary("mod")
abs_max = make_binary("abs_max")
abs_min = make_binary("abs_min")
equal = make_binary("equal")
not_equal = make_binary("not_equal")
less = make_binary("less")
less_equal = make_binary("less_equal")
greater = make_binary("greater")
greater_equal = make_binary("greater_equal")
logical_and = make_binary("logical_and")
logical_or = make_binary("logical_or")
logical_xor = make_binary("logical_xor")
bitwise_and = make_binary("bitwise_and")
bitwise_or = make_binary("bitwise_or")
bitwise_xor = make_binary("bitwise_xor")
left_shift = make_binary("left_shift")
right_shift = make_binary("right_shift")

exp = make_unary("exp")
log = make_unary("log")
sqrt = make_unary("sqrt")
rsqrt = make_unary("rsqrt")
square = make_unary("square")
reciprocal = make_unary("reciprocal")
abs = make_unary("abs")
negative = make_unary("negative")
tanh = make_unary("tanh")
sigmoid = make_unary("sigmoid")
relu = make_unary("relu")
gelu = make_unary("gelu")
gelu_apprx_tanh = make_unary("gelu_apprx_tanh")
gelu_apprx_sigmoid = make_unary("gelu_apprx_sigmoid")
gelu_dx = make_unary("gelu_dx")
gelu_apprx_sigmoid_dx = make_unary("gelu_apprx_sigmoid_dx")
silu = make_unary("silu")
silu_dx = make_unary("silu_dx")
softplus = make_unary("softplus")
mish = make_unary("mish")
erf = make_unary("erf")
erf_dx = make_unary("erf_dx")
sin = make_unary("sin")
cos = make_unary("cos")
tan = make_unary("tan")
arctan = make_unary("arctan")
sign = make_unary("sign")
floor = make_unary("floor")
ceil = make_unary("ceil")
trunc = make_unary("trunc")
logical_not = make_unary("logical_not")
invert = make_unary("invert")
bypass = make_unary("bypass")

sum = make_reduce("sum", "add")
max = make_reduce("max", "maximum")
min = make_reduce("min", "minimum")
prod = make_reduce("prod", "multiply")
mean = make_reduce("mean", "mean")
var = make_reduce("var", "var")
_all = make_reduce("all", "logical_and")


def all(x: Any, axis: Any, dtype: Any = None) -> Any:
    """True where every element along `axis` is nonzero (no keepdims, as in NKI)."""
    return _all(x, axis, dtype)


all._nki_op = "logical_and"  # type: ignore[attr-defined]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise fail("unsupported", f"nl.{name} is not implemented by the nkibot simulator")


__all__ = [
    "MemoryRegion",
    "NKIObject",
    "NkiTensor",
    "abs",
    "abs_max",
    "abs_min",
    "add",
    "affine_range",
    "all",
    "arctan",
    "average",
    "bfloat16",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bool_",
    "broadcast_to",
    "bypass",
    "ceil",
    "copy",
    "cos",
    "device_print",
    "divide",
    "dropout",
    "ds",
    "dynamic_range",
    "empty_like",
    "equal",
    "erf",
    "erf_dx",
    "exp",
    "expand_dims",
    "float4_e2m1fn_x4",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e4m3fn_x4",
    "float8_e5m2",
    "float8_e5m2_x4",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "floor",
    "fmod",
    "fori_loop",
    "full",
    "gather_flattened",
    "gelu",
    "gelu_apprx_sigmoid",
    "gelu_apprx_sigmoid_dx",
    "gelu_apprx_tanh",
    "gelu_dx",
    "greater",
    "greater_equal",
    "hbm",
    "int8",
    "int16",
    "int32",
    "invert",
    "is_hbm",
    "is_on_chip",
    "is_psum",
    "is_sbuf",
    "left_shift",
    "less",
    "less_equal",
    "load",
    "load_transpose2d",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mish",
    "mod",
    "multiply",
    "ndarray",
    "negative",
    "no_reorder",
    "not_equal",
    "num_programs",
    "ones",
    "power",
    "prelu",
    "private_hbm",
    "prod",
    "program_id",
    "program_ndim",
    "psum",
    "rand",
    "random_seed",
    "reciprocal",
    "relu",
    "right_shift",
    "rms_norm",
    "rsqrt",
    "sbuf",
    "sequential_range",
    "shared_constant",
    "shared_hbm",
    "shared_identity_matrix",
    "sigmoid",
    "sign",
    "silu",
    "silu_dx",
    "sin",
    "softmax",
    "softplus",
    "sqrt",
    "square",
    "static_range",
    "store",
    "subtract",
    "sum",
    "tan",
    "tanh",
    "tfloat32",
    "tile_size",
    "transpose",
    "trunc",
    "uint8",
    "uint16",
    "uint32",
    "var",
    "where",
    "while_loop",
    "zeros",
    "zeros_like",
]
