"""Masks, selections, constants and adaptive pooling -> primitives.

- `masked_fill(x, mask, v)` is `where(mask, v, x)`; logical ops are comparisons against 0
  combined by multiply (and), maximum (or) and not-equal (xor); `&`, `|`, `^`, `~` on
  bool tensors are the same.
- `torch.tensor(3.0)` / a one-element tensor attribute is its value: a literal.
- `full`/`zeros`/`ones` (and `_like`, `new_`) are `fill` values; `arange` is the column
  iota scaled and shifted.
- Adaptive pooling to size 1 is a mean (max) over the spatial dims; to a size that
  divides the input, pooling with kernel = stride = input / output.
- Dropout is a copy: references run in eval mode (`decompose._alias`); `F.dropout` with
  `training=True` and p > 0 is random and declined.
"""

from __future__ import annotations

import math

from nkibot.lowering.frontend.convops import pool
from nkibot.lowering.frontend.decompose import HANDLERS, get, out_shape, register, tensor
from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.sink import Sink, Unsupported


@register("masked_fill")
def _masked_fill(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, mask, value = tensor(a[0]), tensor(a[1]), tensor(get(a, k, 2, "value"))
    return s.emit("where", mask, value, x, shape=out_shape(k), last=True)


def _truth(s: Sink, x: Arg) -> Arg:
    return s.emit("ne", x, 0.0) if isinstance(x, Ref) else float(bool(x))


@register("logical_and")
def _logical_and(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("mul", _truth(s, tensor(a[0])), _truth(s, tensor(a[1])), last=True)


@register("logical_or")
def _logical_or(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("maximum", _truth(s, tensor(a[0])), _truth(s, tensor(a[1])), last=True)


@register("logical_xor")
def _logical_xor(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("ne", _truth(s, tensor(a[0])), _truth(s, tensor(a[1])), last=True)


@register("logical_not")
def _logical_not(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("eq", tensor(a[0]), 0.0, last=True)


def _bool_only(s: Sink, op: str) -> None:
    if s.dtype != "bool":
        raise Unsupported(f"aten.bitwise_{op}.Tensor", "bitwise ops on integers")


@register("and_", "bitwise_and", "__and__")
def _and(s: Sink, a: list[object], k: dict[str, object]) -> object:
    _bool_only(s, "and")
    return _logical_and(s, a, k)


@register("or_", "bitwise_or", "__or__")
def _or(s: Sink, a: list[object], k: dict[str, object]) -> object:
    _bool_only(s, "or")
    return _logical_or(s, a, k)


@register("xor", "bitwise_xor", "__xor__")
def _xor(s: Sink, a: list[object], k: dict[str, object]) -> object:
    _bool_only(s, "xor")
    return _logical_xor(s, a, k)


@register("invert", "bitwise_not", "__invert__")
def _invert(s: Sink, a: list[object], k: dict[str, object]) -> object:
    _bool_only(s, "not")
    return _logical_not(s, a, k)


# ---- constants -------------------------------------------------------------------------

@register("tensor", "scalar_tensor", "as_tensor")
def _tensor(s: Sink, a: list[object], k: dict[str, object]) -> object:
    data = get(a, k, 0, "data")
    if isinstance(data, bool | int | float):
        return float(data) if s.dtype in ("float32", "bfloat16", "float16") else data
    raise Unsupported("aten.tensor.default", "a tensor constant of more than one element")


def fill(s: Sink, shape: tuple[int, ...], value: object) -> Ref:
    if not isinstance(value, bool | int | float):
        raise Unsupported("aten.full.default", f"fill value {value!r}")
    return s.emit("fill", shape=shape, last=True, value=float(value))


@register("full")
def _full(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return fill(s, out_shape(k), get(a, k, 1, "fill_value"))


@register("new_full")
def _new_full(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return fill(s, out_shape(k), get(a, k, 2, "fill_value"))


@register("full_like")
def _full_like(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return fill(s, out_shape(k), get(a, k, 1, "fill_value"))


@register("zeros", "new_zeros")
def _zeros(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return fill(s, out_shape(k), 0.0)


@register("ones", "new_ones", "ones_like")
def _ones(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return fill(s, out_shape(k), 1.0)


@register("arange")
def _arange(s: Sink, a: list[object], k: dict[str, object]) -> object:
    numbers = [float(v) for v in a if isinstance(v, int | float)]
    start = numbers[0] if len(numbers) > 1 else 0.0
    step = numbers[2] if len(numbers) > 2 else 1.0
    start, step = _number(k.get("start", start)), _number(k.get("step", step))
    n = out_shape(k)[0]
    index = s.emit("iota", shape=(1, n))
    scaled = s.add(s.mul(index, step), start)
    return s.emit("view", scaled, shape=(n,), last=True)


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise Unsupported("aten.arange.start_step", f"bound {value!r}")
    return float(value)


# ---- max/min with indices, adaptive pooling -------------------------------------------

def _adaptive(kind: str, n: int) -> object:
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        x = tensor(a[0])
        shape = s.shape(x)
        if len(shape) not in (n + 1, n + 2):
            raise Unsupported(f"aten.adaptive_{kind}_pool{n}d.default", "input rank")
        if bool(get(a, k, 2, "return_indices", False)):
            raise Unsupported(f"aten.adaptive_max_pool{n}d.default", "pooling indices")
        spatial = shape[-n:]
        out = out_shape(k)[-n:]
        dims = tuple(range(len(shape) - n, len(shape)))
        if all(o == 1 for o in out):  # global pooling
            op = "rsum" if kind == "avg" else "rmax"
            total = s.reduce(op, x, dims, True)
            return s.mul(total, 1.0 / math.prod(spatial), last=True) if kind == "avg" else (
                s.emit("copy", total, last=True))
        if any(i % o for i, o in zip(spatial, out, strict=True)) or len(shape) != n + 2:
            raise Unsupported(f"aten.adaptive_{kind}_pool{n}d.default",
                              f"output size {list(out)} that does not divide {list(spatial)}")
        kernel = tuple(i // o for i, o in zip(spatial, out, strict=True))
        return pool(s, x, kind, n, k, kernel=kernel, stride=kernel, padding=0)
    return handle


for _n in (1, 2, 3):
    HANDLERS[f"adaptive_avg_pool{_n}d"] = _adaptive("avg", _n)  # type: ignore[assignment]
    HANDLERS[f"adaptive_max_pool{_n}d"] = _adaptive("max", _n)  # type: ignore[assignment]


@register("dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d",
          "dropout3d")
def _dropout(s: Sink, a: list[object], k: dict[str, object]) -> object:
    p, training = get(a, k, 1, "p", 0.5), get(a, k, 2, "training", True)
    if training and p:
        raise Unsupported("aten.dropout.default", "dropout with training=True is random: "
                          "pass training=self.training (references run in eval mode)")
    return s.emit("copy", tensor(a[0]), last=True)


# ---- gathers ---------------------------------------------------------------------------

def _range(s: Sink, ids: Arg) -> tuple[float, float] | None:
    """(start, step) when `ids` is an arange (an iota, scaled and shifted, reshaped)."""
    scale, shift = 1.0, 0.0
    while isinstance(ids, Ref):
        op = s.graph.op(ids.name)
        if op is None:
            return None
        if op.op == "iota":
            return shift, scale
        other = op.args[1] if len(op.args) > 1 else None
        if op.op == "view":
            ids = op.args[0]
        elif op.op in ("add", "mul") and isinstance(other, int | float):
            shift, scale = (shift + scale * other, scale) if op.op == "add" else (
                shift, scale * other)
            ids = op.args[0]
        else:
            return None
    return None


@register("embedding")
def _embedding(s: Sink, a: list[object], k: dict[str, object]) -> object:
    ids, table = tensor(a[0]), tensor(get(a, k, 1, "weight"))
    if get(a, k, 3, "max_norm") is not None:
        raise Unsupported("aten.embedding_renorm.default", "max_norm renormalises the table")
    if not isinstance(table, Ref) or len(s.shape(table)) != 2:
        raise Unsupported("aten.embedding.default", "a table that is not a 2-D tensor")
    found = _range(s, ids)
    rows, width = s.shape(table)
    count = math.prod(s.shape(ids))
    if found is not None and found[1] == 1 and found[0] == int(found[0]) and (
            found[0] >= 0 and found[0] + count <= rows):
        # positions arange(a, a + n): rows a..a+n of the table, a window read in place
        start = int(found[0])
        window = s.emit("subscript", table, shape=(count, width),
                        index=(("slice", start, start + count, None),))
        return s.emit("view", window, shape=out_shape(k), last=True)
    return s.emit("gather", table, ids, shape=out_shape(k), last=True)


@register("index_select")
def _index_select(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, index = tensor(a[0]), tensor(get(a, k, 2, "index"))
    dim = int(str(get(a, k, 1, "dim")))
    if len(s.shape(x)) != 2 or dim % 2 != 0:
        raise Unsupported("aten.index_select.default", "only rows of a 2-D tensor (dim 0)")
    return s.emit("gather", x, index, shape=out_shape(k), last=True)
