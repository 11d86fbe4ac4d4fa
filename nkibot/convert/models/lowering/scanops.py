"""torch scans -> the `scan` primitive: cumsum/cumprod, reversed by flips, masked by a product.

`torch.cumsum(x.flip(d), d).flip(d)` is a reverse scan: the scan of a flip is the flip of
a reverse scan (`flipped`), and a flip of a scan along its dim toggles `flipped`.
`cumsum(x * mask)` of two inputs becomes a masked scan that multiplies while loading.
"""

from __future__ import annotations

from nkibot.convert.models.lowering.decompose import get, register, tensor
from nkibot.convert.models.lowering.ir import Arg, Ref
from nkibot.convert.models.lowering.sink import Sink, Unsupported, norm_dims


def _scan(s: Sink, kind: str, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dim = norm_dims(get(a, k, 1, "dim"), len(s.shape(x)))[0]
    reverse = flipped = False
    args: tuple[Arg, ...] = (x,)
    src = s.graph.op(x.name) if isinstance(x, Ref) else None
    if src is not None and src.op == "flip" and src.attr("dim") == dim:
        reverse, flipped, args = True, True, src.args
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


@register("flip")
def _flip(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dims"), len(s.shape(x)))
    if len(dims) != 1:
        raise Unsupported("aten.flip.default", "a flip of several dims")
    src = s.graph.op(x.name) if isinstance(x, Ref) else None
    if src is not None and src.op == "scan" and src.attr("dim") == dims[0]:
        attrs = {**dict(src.attrs), "flipped": not src.attr("flipped")}
        return s.emit("scan", *src.args, shape=src.shape, last=True, **attrs)
    return s.emit("flip", x, shape=s.shape(x), last=True, dim=dims[0])
