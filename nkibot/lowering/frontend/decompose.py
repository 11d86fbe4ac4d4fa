"""torch ops -> lowering primitives (pointwise, activations, reductions).

Each handler gets the fx node's arguments with tensors replaced by `Ref`s and
everything else constant-folded, and writes primitives into a `Sink`. Composite ops
(norms, softmax, losses, linear) live in `composite.py` and register here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.sink import Sink, Unsupported

Handler = Callable[[Sink, list[object], dict[str, object]], object]
HANDLERS: dict[str, Handler] = {}


def register(*names: str) -> Callable[[Handler], Handler]:
    def wrap(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return wrap


def get(args: list[object], kwargs: dict[str, object], i: int, name: str,
        default: object = None) -> object:
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def out_shape(kwargs: dict[str, object]) -> tuple[int, ...]:
    """The shape torch computed for this node (trace.py passes it along)."""
    shape = kwargs.get("__shape", ())
    return tuple(int(str(d)) for d in shape) if isinstance(shape, tuple | list) else ()


def tensor(value: object) -> Arg:
    if isinstance(value, Ref | int | float | bool):
        return value
    raise Unsupported("aten.scalar_tensor.default", f"operand {value!r} is not a tensor")


_UNARY = {
    "neg": "neg", "negative": "neg", "abs": "abs", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "tanh": "tanh",
    "sigmoid": "sigmoid", "silu": "silu", "erf": "erf", "square": "square",
    "sign": "sign", "sin": "sin", "cos": "cos",
}
for _torch_name, _prim in _UNARY.items():
    def _unary(s: Sink, a: list[object], k: dict[str, object], _p: str = _prim) -> object:
        return s.emit(_p, tensor(a[0]), last=True)
    HANDLERS[_torch_name] = _unary


#: Activations f with f(0) = 0 that keep the sign of their input (f(x) <= 0 for x <= 0,
#: f(x) >= 0 for x >= 0): relu(f(x)) == f(relu(x)).
SIGN_KEEPING = frozenset({"gelu", "gelu_tanh", "silu", "mish", "tanh"})


@register("relu")
def _relu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    """relu(f(x)) as f(relu(x)) when f keeps signs: the ReLU then sits on what made x, where
    a matmul's or a convolution's eviction applies it for free (level 2 69: HardSwish then
    ReLU; 41: GELU then ReLU), instead of a pass of its own after f. f(x) stays in the graph
    for any other reader; the lowering drops it otherwise."""
    x = tensor(a[0])
    inner = _sign_keeping(s, x)
    if inner is None:
        return s.emit("relu", x, last=True)
    kind, arg = inner
    r = s.emit("relu", arg)
    return hardswish(s, r) if kind == "hardswish" else s.emit(kind, r, last=True)


def _sign_keeping(s: Sink, x: Arg) -> tuple[str, Arg] | None:
    """(f, its input) when x = f(input) for a sign-keeping f: one of SIGN_KEEPING, or
    hardswish as `hardswish` writes it (input * clamp(input / 6 + 0.5, 0, 1))."""
    op = s.graph.op(x.name) if isinstance(x, Ref) else None
    if op is None:
        return None
    if op.op in SIGN_KEEPING and len(op.args) == 1 and not op.attrs:
        return op.op, op.args[0]
    if op.op != "mul" or len(op.args) != 2:
        return None
    for base, gate in (op.args, op.args[::-1]):
        if _is_hardsigmoid_of(s, gate, base):
            return "hardswish", base
    return None


def _is_hardsigmoid_of(s: Sink, gate: Arg, x: Arg) -> bool:
    """gate == minimum(maximum(add(mul(x, 1/6), 0.5), 0), 1), as `hardsigmoid` emits it."""
    chain = [("minimum", 1.0), ("maximum", 0.0), ("add", 0.5), ("mul", 1.0 / 6.0)]
    node: Arg = gate
    for name, const in chain:
        op = s.graph.op(node.name) if isinstance(node, Ref) else None
        if op is None or op.op != name or len(op.args) != 2 or op.args[1] != const:
            return False
        node = op.args[0]
    return node == x


@register("contiguous", "clone", "detach", "float", "to", "type_as", "identity")
def _alias(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("copy", tensor(a[0]), last=True)


@register("add", "iadd", "radd")
def _add(s: Sink, a: list[object], k: dict[str, object]) -> object:
    alpha = get(a, k, 2, "alpha", 1)
    return s.add(tensor(a[0]), s.mul(tensor(a[1]), alpha), last=True)  # type: ignore[arg-type]


@register("sub", "isub", "subtract")
def _sub(s: Sink, a: list[object], k: dict[str, object]) -> object:
    alpha = get(a, k, 2, "alpha", 1)
    return s.sub(tensor(a[0]), s.mul(tensor(a[1]), alpha), last=True)  # type: ignore[arg-type]


@register("rsub")
def _rsub(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.sub(tensor(a[1]), tensor(a[0]), last=True)


@register("mul", "imul", "multiply")
def _mul(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, y = tensor(a[0]), tensor(a[1])
    return _gated(s, x, y) or _gated(s, y, x) or s.mul(x, y, last=True)


def _gated(s: Sink, x: Arg, gate: Arg) -> Ref | None:
    """x * sigmoid(x) as silu(x) and x * tanh(softplus(x)) as mish(x): one Scalar Engine
    activation each (both are in the ISA's activation table), where the product takes
    one or two activations and a two-input Vector Engine multiply. The gate's ops stay in
    the graph for any other reader; the lowering drops them otherwise."""
    if not isinstance(x, Ref) or not isinstance(gate, Ref) or s.shape(gate) != s.shape(x):
        return None
    g = s.graph.op(gate.name)
    if g is not None and g.op == "sigmoid" and g.args == (x,):
        return s.emit("silu", x, last=True)
    inner = g.args[0] if g is not None and g.op == "tanh" else None
    sp = s.graph.op(inner.name) if isinstance(inner, Ref) else None
    if sp is not None and sp.op == "softplus" and sp.args == (x,):
        return s.emit("mish", x, last=True)
    return None


@register("truediv", "div", "itruediv", "divide")
def _div(s: Sink, a: list[object], k: dict[str, object]) -> object:
    if get(a, k, 2, "rounding_mode") is not None:
        raise Unsupported("aten.div.Tensor_mode", "rounded division")
    return s.div(tensor(a[0]), tensor(a[1]), last=True)


@register("pow")
def _pow(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, e = tensor(a[0]), tensor(a[1])
    if e == 2:
        return s.emit("square", x, last=True)
    if e == 0.5:
        return s.emit("sqrt", x, last=True)
    if e == -0.5:
        return s.emit("rsqrt", x, last=True)
    if e == 1:
        return s.emit("copy", x, last=True)
    if e == -1:
        return s.emit("reciprocal", x, last=True)
    if isinstance(x, int | float):  # c ** t == exp(t * ln c)
        return s.emit("exp", s.mul(e, math.log(x)), last=True)
    return s.emit("pow", x, e, last=True)


@register("maximum", "fmax")
def _maximum(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("maximum", tensor(a[0]), tensor(a[1]), last=True)


@register("minimum", "fmin")
def _minimum(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("minimum", tensor(a[0]), tensor(a[1]), last=True)


for _cmp in ("gt", "ge", "lt", "le", "eq", "ne"):
    def _compare(s: Sink, a: list[object], k: dict[str, object], _c: str = _cmp) -> object:
        return s.emit(_c, tensor(a[0]), tensor(a[1]), last=True)
    HANDLERS[_cmp] = _compare
HANDLERS.update(greater=HANDLERS["gt"], less=HANDLERS["lt"], greater_equal=HANDLERS["ge"],
                less_equal=HANDLERS["le"], not_equal=HANDLERS["ne"])


@register("where")
def _where(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("where", tensor(a[0]), tensor(a[1]), tensor(a[2]), last=True)


def clamp(s: Sink, x: Arg, lo: object, hi: object, last: bool = True) -> Arg:
    out = x
    if lo is not None:
        out = s.emit("maximum", out, tensor(lo), last=last and hi is None)
    if hi is not None:
        out = s.emit("minimum", out, tensor(hi), last=last)
    return out if out is not x else s.emit("copy", x, last=last)


@register("clamp", "clip")
def _clamp(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return clamp(s, tensor(a[0]), get(a, k, 1, "min"), get(a, k, 2, "max"))


@register("clamp_min")
def _clamp_min(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return clamp(s, tensor(a[0]), a[1], None)


@register("clamp_max")
def _clamp_max(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return clamp(s, tensor(a[0]), None, a[1])


@register("hardtanh")
def _hardtanh(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return clamp(s, tensor(a[0]), get(a, k, 1, "min_val", -1.0), get(a, k, 2, "max_val", 1.0))


@register("relu6")
def _relu6(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return clamp(s, tensor(a[0]), 0.0, 6.0)


@register("leaky_relu")
def _leaky_relu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, slope = tensor(a[0]), get(a, k, 1, "negative_slope", 0.01)
    # max(x, s * x) when s <= 1 (min when s > 1): one fused op where the split form is three
    pick = "maximum" if float(slope) <= 1.0 else "minimum"  # type: ignore[arg-type]
    return s.emit(pick, x, s.mul(x, slope), last=True)  # type: ignore[arg-type]


def _elu_like(s: Sink, x: Arg, alpha: float, scale: float) -> Arg:
    # max(x, 0) + alpha * (exp(min(x, 0)) - 1): exp never sees large positives
    neg = s.mul(s.add(s.emit("exp", s.emit("minimum", x, 0.0)), -1.0), alpha)
    total = s.add(s.emit("maximum", x, 0.0), neg, last=scale == 1.0)
    return s.mul(total, scale, last=True)


@register("elu")
def _elu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _elu_like(s, tensor(a[0]), float(get(a, k, 1, "alpha", 1.0)), 1.0)  # type: ignore[arg-type]


@register("selu")
def _selu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _elu_like(s, tensor(a[0]), 1.6732632423543772, 1.0507009873554805)


@register("celu")
def _celu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, alpha = tensor(a[0]), float(get(a, k, 1, "alpha", 1.0))  # type: ignore[arg-type]
    neg = s.mul(s.add(s.emit("exp", s.mul(s.emit("minimum", x, 0.0), 1.0 / alpha)), -1.0), alpha)
    return s.add(s.emit("maximum", x, 0.0), neg, last=True)


def hardsigmoid(s: Sink, x: Arg, last: bool) -> Arg:
    return clamp(s, s.add(s.mul(x, 1.0 / 6.0), 0.5), 0.0, 1.0, last=last)


@register("hardsigmoid")
def _hardsigmoid(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return hardsigmoid(s, tensor(a[0]), last=True)


def hardswish(s: Sink, x: Arg) -> Arg:
    """x * hardsigmoid(x), the form `_sign_keeping` recognises."""
    return s.mul(x, hardsigmoid(s, x, last=False), last=True)


@register("hardswish")
def _hardswish(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return hardswish(s, tensor(a[0]))


@register("softsign")
def _softsign(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    return s.mul(x, s.emit("reciprocal", s.add(s.emit("abs", x), 1.0)), last=True)


@register("softplus")
def _softplus(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, beta = tensor(a[0]), float(get(a, k, 1, "beta", 1.0))  # type: ignore[arg-type]
    if beta == 1.0:
        return s.emit("softplus", x, last=True)
    return s.mul(s.emit("softplus", s.mul(x, beta)), 1.0 / beta, last=True)


@register("mish")
def _mish(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("mish", tensor(a[0]), last=True)


@register("gelu")
def _gelu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    tanh_form = get(a, k, 1, "approximate", "none") == "tanh"
    return s.emit("gelu_tanh" if tanh_form else "gelu", tensor(a[0]), last=True)


@register("silu_", "swish")
def _silu(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("silu", tensor(a[0]), last=True)


@register("logsigmoid")
def _logsigmoid(s: Sink, a: list[object], k: dict[str, object]) -> object:
    # log(sigmoid(x)) = -softplus(-x)
    return s.emit("neg", s.emit("softplus", s.emit("neg", tensor(a[0]))), last=True)
