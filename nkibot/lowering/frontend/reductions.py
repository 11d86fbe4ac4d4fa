"""Reductions: sum/mean/max/min/prod over dims, var/std, vector norms."""

from __future__ import annotations

import math

from nkibot.lowering.frontend.decompose import HANDLERS, Handler, get, register, tensor
from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.sink import Sink, Unsupported, norm_dims


def _reduction(op: str, with_indices: bool = False) -> Handler:
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        x = tensor(a[0])
        dim = get(a, k, 1, "dim")
        if with_indices and len(a) > 1 and "__shape" in k:  # torch.max(x, other): one tensor
            return s.emit("maximum" if op == "rmax" else "minimum", x, tensor(a[1]), last=True)
        dims = norm_dims(dim, len(s.shape(x)))
        keep = bool(get(a, k, 2, "keepdim", False))
        out = s.reduce(op, x, dims, keep, last=True)
        if with_indices and isinstance(dim, int):  # torch.max(x, dim): (values, indices)
            return (out, indices(s, x, op, dims, keep))
        return out
    return handle


HANDLERS.update(sum=_reduction("rsum"), amax=_reduction("rmax"), amin=_reduction("rmin"),
                max=_reduction("rmax", True), min=_reduction("rmin", True),
                prod=_reduction("rprod"))


@register("mean")
def _mean(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))
    return s.mean(x, dims, bool(get(a, k, 2, "keepdim", False)), last=True)


def variance(s: Sink, x: Arg, dims: tuple[int, ...], correction: float, keep: bool,
             last: bool) -> Arg:
    shape = s.shape(x)
    count = math.prod(shape[d] for d in dims)
    centred = s.sub(x, s.mean(x, dims, True))
    total = s.reduce("rsum", s.emit("square", centred), dims, True)
    var = s.mul(total, 1.0 / max(count - correction, 1), last=last and keep)
    if keep:
        return var
    return s.emit("view", var, shape=tuple(d for i, d in enumerate(shape) if i not in dims),
                  last=last)


def _correction(a: list[object], k: dict[str, object]) -> float:
    if "correction" in k and k["correction"] is not None:
        return float(k["correction"])  # type: ignore[arg-type]
    unbiased = get(a, k, 2, "unbiased", True)
    return 1.0 if unbiased else 0.0


@register("var")
def _var(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))
    return variance(s, x, dims, _correction(a, k), bool(k.get("keepdim", False)), last=True)


@register("std")
def _std(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))
    var = variance(s, x, dims, _correction(a, k), bool(k.get("keepdim", False)), last=False)
    return s.emit("sqrt", var, last=True)


def vector_norm(s: Sink, x: Arg, p: object, dims: tuple[int, ...], keep: bool,
                last: bool) -> Arg:
    if p in (2, 2.0, "fro", None):
        return s.emit("sqrt", s.reduce("rsum", s.emit("square", x), dims, keep), last=last)
    if p in (1, 1.0):
        return s.reduce("rsum", s.emit("abs", x), dims, keep, last=last)
    if p in (math.inf, "inf"):
        return s.reduce("rmax", s.emit("abs", x), dims, keep, last=last)
    raise Unsupported("aten.linalg_vector_norm.default", f"p={p!r}")


@register("norm", "vector_norm", "linalg_vector_norm")
def _norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    p = get(a, k, 1, "p", k.get("ord", 2))
    dims = norm_dims(get(a, k, 2, "dim"), len(s.shape(x)))
    return vector_norm(s, x, p, dims, bool(get(a, k, 3, "keepdim", False)), last=True)


def indices(s: Sink, x: Arg, peak: str, dims: tuple[int, ...], keep: bool) -> Ref:
    """The first index of the extreme along dims[0] (torch.max(x, dim).indices), int64."""
    shape = s.shape(x)
    hit = s.emit("eq", x, s.reduce(peak, x, dims, True))
    index = s.emit("iota", shape=tuple(d if i in dims else 1 for i, d in enumerate(shape)))
    picked = s.emit("where", hit, index, float(shape[dims[0]]))
    dtype, s.dtype = s.dtype, "int64"
    try:
        return s.reduce("rmin", picked, dims, keep)
    finally:
        s.dtype = dtype


def _arg_reduction(peak: str) -> Handler:
    """argmax/argmin: the first index where x equals its max (min) along `dim`."""
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        x = tensor(a[0])
        dim = get(a, k, 1, "dim")
        if dim is None:
            raise Unsupported(f"aten.arg{peak[1:]}.default", "over the flattened tensor")
        shape = s.shape(x)
        dims = norm_dims(dim, len(shape))
        keep = bool(get(a, k, 2, "keepdim", False))
        hit = s.emit("eq", x, s.reduce(peak, x, dims, True))
        # the index along dim, as fp32 (exact below 2**24); misses get a larger value
        index = s.emit("iota", shape=tuple(d if i in dims else 1 for i, d in enumerate(shape)))
        picked = s.emit("where", hit, index, float(shape[dims[0]]))
        return s.reduce("rmin", picked, dims, keep, last=True)
    return handle


HANDLERS.update(argmax=_arg_reduction("rmax"), argmin=_arg_reduction("rmin"))


#: The most values `topk` unrolls into (one max, one first index and one knock-out each).
TOPK_MAX = 16


@register("topk")
def _topk(s: Sink, a: list[object], k: dict[str, object]) -> object:
    """torch.topk(x, k, dim) along one dim: k rounds of (max, first index of it, knock it
    out with -inf), the values and indices then placed in their columns by a column iota.

    The indices of tied values are the first ones in each round (torch's CPU kernel leaves
    the order of ties unspecified)."""
    x, count = tensor(a[0]), int(str(get(a, k, 1, "k")))
    shape = s.shape(x)
    dims = norm_dims(get(a, k, 2, "dim", -1), len(shape))
    largest = bool(get(a, k, 3, "largest", True))
    if not 1 <= count <= TOPK_MAX:
        raise Unsupported("aten.topk.default", f"k={count} (at most {TOPK_MAX} are unrolled)")
    dim = dims[0]
    n = shape[dim]
    peak, gone = ("rmax", -math.inf) if largest else ("rmin", math.inf)
    index = s.emit("iota", shape=tuple(d if i == dim else 1 for i, d in enumerate(shape)))
    current: Arg = x
    tops, firsts = [], []
    for round_ in range(count):
        tops.append(s.reduce(peak, current, (dim,), True))
        hit = s.emit("eq", current, tops[-1])
        firsts.append(s.reduce("rmin", s.emit("where", hit, index, float(n)), (dim,), True))
        if round_ < count - 1:
            current = s.emit("where", s.emit("eq", index, firsts[-1]), gone, current)
    # the k columns: a layout of their own (the rounds run over the n columns of x)
    column = s.emit("iota", shape=tuple(count if i == dim else 1 for i in range(len(shape))))
    values: Arg = 0.0
    chosen: Arg = 0.0
    for round_, (top, first) in enumerate(zip(tops, firsts, strict=True)):
        here = s.emit("eq", column, float(round_))
        values = s.emit("where", here, top, values)
        chosen = s.emit("where", here, first, chosen)
    values = s.emit("copy", values, last=True)
    dtype, s.dtype = s.dtype, "int64"
    try:
        indices_ = s.emit("copy", chosen)
    finally:
        s.dtype = dtype
    return (values, indices_)
