"""Composite torch ops -> primitives: softmax family, norms, views, the matmul family."""

from __future__ import annotations

import math

from nkibot.lowering.frontend.decompose import (
    HANDLERS,
    Handler,
    get,
    out_shape,
    register,
    tensor,
)
from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.reductions import vector_norm
from nkibot.lowering.frontend.sink import Sink, Unsupported, norm_dims


def _dim(s: Sink, x: Arg, a: list[object], k: dict[str, object], i: int = 1) -> int:
    dim = get(a, k, i, "dim", -1)
    return norm_dims(-1 if dim is None else dim, len(s.shape(x)))[0]


@register("softmax")
def _softmax(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = (_dim(s, x, a, k),)
    shifted = s.sub(x, s.reduce("rmax", x, dims, True))
    e = s.emit("exp", shifted)
    return s.mul(e, s.emit("reciprocal", s.reduce("rsum", e, dims, True)), last=True)


@register("log_softmax")
def _log_softmax(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = (_dim(s, x, a, k),)
    shifted = s.sub(x, s.reduce("rmax", x, dims, True))
    lse = s.emit("log", s.reduce("rsum", s.emit("exp", shifted), dims, True))
    return s.sub(shifted, lse, last=True)


@register("logsumexp")
def _logsumexp(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))
    keep = bool(get(a, k, 2, "keepdim", False))
    peak = s.reduce("rmax", x, dims, True)
    lse = s.emit("log", s.reduce("rsum", s.emit("exp", s.sub(x, peak)), dims, True))
    total = s.add(lse, peak, last=keep)
    if keep:
        return total
    shape = s.shape(x)
    return s.emit("view", total, shape=tuple(d for i, d in enumerate(shape) if i not in dims),
                  last=True)


def _affine(s: Sink, y: Arg, weight: object, bias: object, view: tuple[int, ...] | None) -> Arg:
    def shaped(p: object) -> Arg:
        ref = tensor(p)
        return s.emit("view", ref, shape=view) if view and isinstance(ref, Ref) else ref
    if weight is not None:
        y = s.mul(y, shaped(weight), last=bias is None)
    if bias is not None:
        y = s.add(y, shaped(bias), last=True)
    return y


@register("layer_norm")
def _layer_norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    normalized = get(a, k, 1, "normalized_shape")
    count = len(normalized) if isinstance(normalized, list | tuple) else 1
    dims = tuple(range(rank - count, rank))
    eps = float(get(a, k, 4, "eps", 1e-5))  # type: ignore[arg-type]
    weight, bias = get(a, k, 2, "weight"), get(a, k, 3, "bias")
    if math.prod(s.shape(x)[rank - count:]) > BLOCK_ROWS:
        return _blocknorm(s, x, weight, bias, kind="layer", eps=eps, count=count)
    centred = s.sub(x, s.mean(x, dims, True))
    var = s.mean(s.emit("square", centred), dims, True)
    y = s.mul(centred, s.emit("rsqrt", s.add(var, eps)), last=weight is None and bias is None)
    return _affine(s, y, weight, bias, None)


#: Normalised rows longer than this go to the block emitter (norm.py), not one row a tile.
BLOCK_ROWS = 4096


def _blocknorm(s: Sink, x: Arg, weight: object, bias: object, **attrs: object) -> Arg:
    params = [tensor(p) for p in (weight, bias) if p is not None]
    if weight is None and bias is not None:
        raise Unsupported("aten.native_layer_norm.default", "a bias without a weight")
    return s.emit("blocknorm", x, *params, shape=s.shape(x), last=True, **attrs)


@register("rms_norm")
def _rms_norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    normalized = get(a, k, 1, "normalized_shape")
    count = len(normalized) if isinstance(normalized, list | tuple) else 1
    dims = tuple(range(rank - count, rank))
    eps = get(a, k, 3, "eps")
    eps_value = 1.1920928955078125e-07 if eps is None else float(eps)  # type: ignore[arg-type]
    weight = get(a, k, 2, "weight")
    ms = s.mean(s.emit("square", x), dims, True)
    y = s.mul(x, s.emit("rsqrt", s.add(ms, eps_value)), last=weight is None)
    return _affine(s, y, weight, None, None)


@register("normalize")
def _normalize(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 2, "dim", 1), len(s.shape(x)))
    eps = float(get(a, k, 3, "eps", 1e-12))  # type: ignore[arg-type]
    norm = vector_norm(s, x, get(a, k, 1, "p", 2.0), dims, True, last=False)
    return s.mul(x, s.emit("reciprocal", s.emit("maximum", norm, eps)), last=True)


def _channel_view(s: Sink, x: Arg) -> tuple[int, ...]:
    shape = s.shape(x)
    return (shape[1], *([1] * (len(shape) - 2)))


@register("batch_norm")
def _batch_norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    if get(a, k, 5, "training", False):
        return _batch_norm_train(s, x, a, k)
    mean, var = tensor(get(a, k, 1, "running_mean")), tensor(get(a, k, 2, "running_var"))
    eps = float(get(a, k, 7, "eps", 1e-5))  # type: ignore[arg-type]
    weight, bias = get(a, k, 3, "weight"), get(a, k, 4, "bias")
    shape = s.shape(x)
    if len(shape) >= 3 and (weight is not None) == (bias is not None):
        # one per-row scale and shift, rows (batch x channels) on the partitions (whatever
        # the plane's size: the emitter takes a long row in chunks)
        params = [tensor(p) for p in (weight, bias) if p is not None]
        return s.emit("blocknorm", x, mean, var, *params, shape=shape, last=True,
                      kind="batch", eps=eps)
    view = _channel_view(s, x)
    mean_v = s.emit("view", mean, shape=view)
    inv = s.emit("rsqrt", s.add(s.emit("view", var, shape=view), eps))
    y = s.mul(s.sub(x, mean_v), inv, last=weight is None and bias is None)
    return _affine(s, y, weight, bias, view)


def _batch_norm_train(s: Sink, x: Arg, a: list[object], k: dict[str, object]) -> object:
    """Batch statistics (training form): one blocknorm, rows (batch x channels) on the
    partitions; the running statistics' update is not an output, so it is not computed."""
    eps = float(get(a, k, 7, "eps", 1e-5))  # type: ignore[arg-type]
    weight, bias = get(a, k, 3, "weight"), get(a, k, 4, "bias")
    shape = s.shape(x)
    if len(shape) < 3 or (weight is None) != (bias is None):
        raise Unsupported("aten.batch_norm.training",
                          "batch statistics in training mode over fewer than 3 dims, or a "
                          "weight without a bias (call model.eval() to use the running "
                          "statistics)")
    params = [tensor(p) for p in (weight, bias) if p is not None]
    return s.emit("blocknorm", x, *params, shape=shape, last=True, kind="batch_train",
                  eps=eps)


@register("instance_norm")
def _instance_norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    dims = tuple(range(2, rank))
    eps = float(get(a, k, 7, "eps", 1e-5))  # type: ignore[arg-type]
    centred = s.sub(x, s.mean(x, dims, True))
    var = s.mean(s.emit("square", centred), dims, True)
    weight, bias = get(a, k, 3, "weight"), get(a, k, 4, "bias")
    y = s.mul(centred, s.emit("rsqrt", s.add(var, eps)), last=weight is None and bias is None)
    return _affine(s, y, weight, bias, _channel_view(s, x))


@register("group_norm")
def _group_norm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    shape = s.shape(x)
    groups = int(get(a, k, 1, "num_groups"))  # type: ignore[call-overload]
    weight, bias = get(a, k, 2, "weight"), get(a, k, 3, "bias")
    eps = float(get(a, k, 4, "eps", 1e-5))  # type: ignore[arg-type]
    if weight is not None or bias is not None or math.prod(shape[1:]) // groups > BLOCK_ROWS:
        return _blocknorm(s, x, weight, bias, kind="group", eps=eps, groups=groups)
    grouped = s.emit("view", x, shape=(shape[0], groups, math.prod(shape[1:]) // groups))
    centred = s.sub(grouped, s.mean(grouped, (2,), True))
    var = s.mean(s.emit("square", centred), (2,), True)
    y = s.mul(centred, s.emit("rsqrt", s.add(var, eps)))
    return s.emit("view", y, shape=shape, last=True)


# ---- views -------------------------------------------------------------------------

def _view_to(s: Sink, x: Arg, shape: tuple[int, ...]) -> object:
    return s.emit("view", tensor(x), shape=shape, last=True)


@register("view", "reshape", "flatten", "squeeze", "unsqueeze", "view_as", "reshape_as",
          "expand_as_view")
def _view(s: Sink, a: list[object], k: dict[str, object]) -> object:
    # the traced output shape is authoritative; trace.py passes it as `__shape`
    return _view_to(s, tensor(a[0]), out_shape(k))


# ---- matmul family -----------------------------------------------------------------

@register("matmul", "mm", "bmm", "einsum_mm")
def _matmul(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("matmul", tensor(a[0]), tensor(a[1]), shape=out_shape(k), last=True)


@register("linear")
def _linear(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, w, b = tensor(a[0]), tensor(get(a, k, 1, "weight")), get(a, k, 2, "bias")
    wt = s.emit("transpose", w, shape=tuple(reversed(s.shape(w))))
    y = s.emit("matmul", x, wt, shape=out_shape(k), last=b is None)
    return y if b is None else s.add(y, tensor(b), last=True)


@register("addmm")
def _addmm(s: Sink, a: list[object], k: dict[str, object]) -> object:
    bias, x, w = tensor(a[0]), tensor(a[1]), tensor(a[2])
    beta, alpha = get(a, k, 3, "beta", 1), get(a, k, 4, "alpha", 1)
    y = s.mul(s.emit("matmul", x, w, shape=out_shape(k)), alpha)  # type: ignore[arg-type]
    return s.add(y, s.mul(bias, beta), last=True)  # type: ignore[arg-type]


def _triangle(op: str) -> Handler:
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        x = tensor(a[0])
        if len(s.shape(x)) != 2:
            raise Unsupported(f"aten.{op}.default", "a batch of matrices")
        diagonal = int(str(get(a, k, 1, "diagonal", 0)))
        return s.emit(op, x, shape=s.shape(x), last=True, diagonal=diagonal)
    return handle


HANDLERS.update(triu=_triangle("triu"), tril=_triangle("tril"))


@register("einsum")
def _einsum(s: Sink, a: list[object], k: dict[str, object]) -> object:
    """Einsums that are one matmul: `...l,lk->...k` (a batch of rows times one matrix) and
    `...ij,...jk->...ik`."""
    equation = str(a[0]).replace(" ", "")
    operands = a[1:] if len(a) > 2 else list(a[1]) if isinstance(a[1], list | tuple) else []
    if len(operands) != 2 or "->" not in equation:
        raise Unsupported("aten.einsum.default", f"equation {equation!r}")
    (left, right), out = equation.split("->")[0].split(","), equation.split("->")[1]
    x, y = tensor(operands[0]), tensor(operands[1])
    shared = len(right) == 2 and left[-1] == right[0] and out == left[:-1] + right[1]
    batched = (len(left) == len(right) == len(out) >= 2 and left[:-2] == right[:-2] == out[:-2]
               and left[-1] == right[-2] and out[-2:] == left[-2] + right[-1])
    if not (shared or batched) or len(set(left)) != len(left):
        raise Unsupported("aten.einsum.default", f"equation {equation!r} is not one matmul")
    return s.emit("matmul", x, y, shape=out_shape(k), last=True)
