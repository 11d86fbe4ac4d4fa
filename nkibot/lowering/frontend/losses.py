"""Losses that reduce to the primitives: MSE, L1, Huber/smooth L1, KL, cosine, cross-entropy."""

from __future__ import annotations

import math

from nkibot.lowering.frontend.decompose import get, register, tensor
from nkibot.lowering.frontend.ir import Arg
from nkibot.lowering.frontend.sink import Sink, Unsupported, norm_dims


def _reduce_loss(s: Sink, loss: Arg, reduction: object, batch: int = 1) -> object:
    dims = tuple(range(len(s.shape(loss))))
    if reduction == "none":
        return s.emit("copy", loss, last=True)
    if reduction == "sum":
        return s.reduce("rsum", loss, dims, False, last=True)
    total = s.reduce("rsum", loss, dims, False)
    count = math.prod(s.shape(loss)) if reduction == "mean" else batch
    return s.mul(total, 1.0 / count, last=True)


@register("mse_loss")
def _mse(s: Sink, a: list[object], k: dict[str, object]) -> object:
    diff = s.sub(tensor(a[0]), tensor(a[1]))
    return _reduce_loss(s, s.emit("square", diff), get(a, k, 3, "reduction", "mean"))


@register("l1_loss")
def _l1(s: Sink, a: list[object], k: dict[str, object]) -> object:
    diff = s.sub(tensor(a[0]), tensor(a[1]))
    return _reduce_loss(s, s.emit("abs", diff), get(a, k, 3, "reduction", "mean"))


def _huber(s: Sink, a: list[object], k: dict[str, object], delta: float, smooth: bool) -> object:
    diff = s.sub(tensor(a[0]), tensor(a[1]))
    ad = s.emit("abs", diff)
    quad = s.mul(s.emit("square", diff), 0.5 / delta if smooth else 0.5)
    lin = s.add(ad, -0.5 * delta)
    lin = lin if smooth else s.mul(lin, delta)
    loss = s.emit("where", s.emit("lt", ad, delta), quad, lin)
    return _reduce_loss(s, loss, get(a, k, 3, "reduction", "mean"))


@register("smooth_l1_loss")
def _smooth_l1(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _huber(s, a, k, float(get(a, k, 5, "beta", 1.0)), smooth=True)  # type: ignore[arg-type]


@register("huber_loss")
def _huber_loss(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _huber(s, a, k, float(get(a, k, 4, "delta", 1.0)), smooth=False)  # type: ignore[arg-type]


@register("kl_div")
def _kl_div(s: Sink, a: list[object], k: dict[str, object]) -> object:
    inp, target = tensor(a[0]), tensor(a[1])
    log_target = bool(get(a, k, 5, "log_target", False))
    if log_target:
        pointwise = s.mul(s.emit("exp", target), s.sub(target, inp))
    else:
        pointwise = s.mul(target, s.sub(s.emit("log", target), inp))
    batch = s.shape(inp)[0] if s.shape(inp) else 1
    return _reduce_loss(s, pointwise, get(a, k, 4, "reduction", "mean"), batch)


@register("cosine_similarity")
def _cosine_similarity(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x, y = tensor(a[0]), tensor(a[1])
    dims = norm_dims(get(a, k, 2, "dim", 1), len(s.shape(x)))
    eps = float(get(a, k, 3, "eps", 1e-8))  # type: ignore[arg-type]
    dot = s.reduce("rsum", s.mul(x, y), dims, True)
    nx = s.emit("maximum", s.emit("sqrt", s.reduce("rsum", s.emit("square", x), dims, True)), eps)
    ny = s.emit("maximum", s.emit("sqrt", s.reduce("rsum", s.emit("square", y), dims, True)), eps)
    cos = s.mul(dot, s.emit("reciprocal", s.mul(nx, ny)))
    shape = s.shape(x)
    return s.emit("view", cos, shape=tuple(d for i, d in enumerate(shape) if i not in dims),
                  last=True)


@register("cross_entropy")
def _cross_entropy(s: Sink, a: list[object], k: dict[str, object]) -> object:
    logits, target = tensor(a[0]), tensor(a[1])
    shape = s.shape(logits)
    if len(shape) != 2 or s.shape(target) != shape[:1]:
        raise Unsupported("aten.cross_entropy_loss.default", "needs [N, C] logits, [N] targets")
    if get(a, k, 2, "weight") is not None:
        raise Unsupported("aten.cross_entropy_loss.default", "class weights")
    smoothing = float(str(get(a, k, 5, "label_smoothing", 0.0)))
    # loss_n = logsumexp(x_n) - x_n[t_n]; x_n[t_n] = sum_c x_nc * (c == t_n)
    peak = s.reduce("rmax", logits, (1,), True)
    lse = s.add(s.emit("log", s.reduce("rsum", s.emit("exp", s.sub(logits, peak)), (1,),
                                       True)), peak)
    classes = s.emit("iota", shape=(1, shape[1]))
    onehot = s.emit("eq", classes, s.emit("view", target, shape=(shape[0], 1)))
    picked: Arg = s.reduce("rsum", s.mul(onehot, logits), (1,), True)
    if smoothing:
        # label smoothing: the target is (1 - e) one-hot + e / C everywhere, so
        # loss_n = lse - (1 - e) x_n[t_n] - e mean_c x_nc (PyTorch's formula without weights)
        row_mean = s.mul(s.reduce("rsum", logits, (1,), True), smoothing / shape[1])
        picked = s.add(s.mul(picked, 1.0 - smoothing), row_mean)
    reduction = get(a, k, 4, "reduction", "mean")
    if reduction == "none":
        return s.emit("view", s.sub(lse, picked), shape=shape[:1], last=True)
    return _reduce_loss(s, s.sub(lse, picked), reduction)


@register("triplet_margin_loss")
def _triplet_margin(s: Sink, a: list[object], k: dict[str, object]) -> object:
    """mean(max(d(a, p) - d(a, n) + margin, 0)), d = ||x - y + eps||_p over the last dim."""
    anchor, pos, neg = tensor(a[0]), tensor(a[1]), tensor(a[2])
    margin = float(get(a, k, 3, "margin", 1.0))  # type: ignore[arg-type]
    p = float(get(a, k, 4, "p", 2.0))  # type: ignore[arg-type]
    eps = float(get(a, k, 5, "eps", 1e-6))  # type: ignore[arg-type]
    if get(a, k, 6, "swap", False) or p != 2.0:
        raise Unsupported("aten.triplet_margin_loss.default", "swap or p != 2")
    last = len(s.shape(anchor)) - 1

    def dist(x: Arg, y: Arg) -> Arg:
        diff = s.add(s.sub(x, y), eps)
        return s.emit("sqrt", s.reduce("rsum", s.emit("square", diff), (last,), True))
    hinge = s.emit("maximum", s.add(s.sub(dist(anchor, pos), dist(anchor, neg)), margin), 0.0)
    return _reduce_loss(s, hinge, get(a, k, 7, "reduction", "mean"))
