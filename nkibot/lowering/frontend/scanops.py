"""torch scans -> the `scan` primitive: cumsum/cumprod, reversed by flips, masked by a product.

`torch.cumsum(x.flip(d), d).flip(d)` is a reverse scan: the scan of a flip is the flip of
a reverse scan (`flipped`), and a flip of a scan along its dim toggles `flipped`.
`cumsum(x * mask)` of two inputs becomes a masked scan that multiplies while loading.
"""

from __future__ import annotations

from nkibot.lowering.frontend.decompose import get, out_shape, register, tensor
from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.sink import Sink, Unsupported, norm_dims


def _scan(s: Sink, kind: str, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dim = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))[0]
    reverse = flipped = False
    args: tuple[Arg, ...] = (x,)
    src = s.graph.op(x.name) if isinstance(x, Ref) else None
    if src is not None and src.op == "flip" and src.attr("dim") == dim:
        reverse, flipped, args = True, True, src.args
    elif src is not None and src.op == "narrow" and src.attr("dim") == dim and (
            src.attr("start") == 0):
        # cumsum of x[..., :L-1]: the start of an exclusive scan (folded by cat below)
        return s.emit("scan", x, shape=s.shape(x), last=True, kind=kind, dim=dim,
                      reverse=False, exclusive=False, flipped=False, narrowed=True)
    elif src is not None and src.op == "mul" and kind == "sum" and all(
            isinstance(v, Ref) and s.graph.leaf(v.name) is not None
            and s.shape(v) == s.shape(x) for v in src.args):
        args = src.args  # masked: x * mask, both inputs
    if get(a, k, 2, "dtype") is not None:
        raise Unsupported(f"aten.cum{kind}.default", "an explicit dtype")
    return s.emit("scan", *args, shape=s.shape(x), last=True, kind=kind, dim=dim,
                  reverse=reverse, exclusive=False, flipped=flipped)


@register("cumsum")
def _cumsum(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _scan(s, "sum", a, k)


@register("cumprod")
def _cumprod(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return _scan(s, "prod", a, k)


def fold_flip(s: Sink, x: Arg, dims: tuple[int, ...]) -> Ref | None:
    """A flip of a scan along its dim toggles the scan's `flipped` (layoutops' flip)."""
    src = s.graph.op(x.name) if isinstance(x, Ref) else None
    if len(dims) == 1 and src is not None and src.op == "scan" and src.attr("dim") == dims[0]:
        attrs = {**dict(src.attrs), "flipped": not src.attr("flipped")}
        return s.emit("scan", *src.args, shape=src.shape, last=True, **attrs)
    return None


# ---- the exclusive scan written as cat((zeros, cumsum(narrow(x, 0, L - 1))), dim) ----------

@register("narrow")
def _narrow(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dim = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))[0]
    start, length = int(str(get(a, k, 2, "start"))), int(str(get(a, k, 3, "length")))
    shape = tuple(length if i == dim else d for i, d in enumerate(s.shape(x)))
    return s.emit("narrow", x, shape=shape, last=True, dim=dim, start=start)


@register("zeros_like")
def _zeros_like(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return s.emit("zeros", shape=s.shape(tensor(a[0])), last=True)


@register("cat", "concat", "concatenate")
def _cat(s: Sink, a: list[object], k: dict[str, object]) -> object:
    parts = get(a, k, 0, "tensors")
    items = list(parts) if isinstance(parts, list | tuple) else []
    found = [s.graph.op(p.name) if isinstance(p, Ref) else None for p in items]
    zeros, scan = (found[0], found[1]) if len(found) == 2 else (None, None)
    if zeros is not None and scan is not None:
        dim = scan.attr("dim")
        if (zeros.op == "zeros" and scan.op == "scan" and scan.attr("narrowed")
                and norm_dims(get(a, k, 1, "dim", 0), len(scan.shape))[0] == dim
                and zeros.shape[int(str(dim))] == 1):
            attrs = {**dict(scan.attrs), "narrowed": False, "exclusive": True}
            src = s.graph.op(scan.args[0].name) if isinstance(scan.args[0], Ref) else None
            args = src.args if src is not None and src.op == "narrow" else scan.args
            return s.emit("scan", *args, shape=s.shape(args[0]), last=True, **attrs)
    shape = out_shape(k)
    dim = norm_dims(get(a, k, 1, "dim", 0), len(shape))[0]
    refs = [p for p in items if not (isinstance(p, Ref) and 0 in s.shape(p))]  # empty parts
    if not refs or not all(isinstance(p, Ref) for p in refs):
        raise Unsupported("aten.cat.default", "parts that are not tensors")
    return s.emit("cat", *refs, shape=shape, last=True, dim=dim)
