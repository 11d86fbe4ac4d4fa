"""Layout ops -> view primitives: transpose/permute, flips, slicing, select, expand, splits.

Each becomes one view primitive with its static parameters; `layout.resolve` folds chains
of them on a kernel argument into one access pattern (`strided.py`). A swap of the last
two dims stays `transpose` (a matmul reads that operand in place); the identity is a copy.
"""

from __future__ import annotations

from nkibot.lowering.frontend.decompose import get, out_shape, register, tensor
from nkibot.lowering.frontend.ir import Arg, Ref
from nkibot.lowering.frontend.sink import Sink, Unsupported, norm_dims


def permuted(s: Sink, x: Arg, perm: tuple[int, ...]) -> Ref:
    """x.permute(perm) as transpose (last two dims), copy (identity) or permute."""
    shape = s.shape(x)
    out = tuple(shape[p] for p in perm)
    n = len(perm)
    if perm == tuple(range(n)):
        return s.emit("copy", x, shape=out, last=True)
    if n >= 2 and perm == (*range(n - 2), n - 1, n - 2):
        return s.emit("transpose", x, shape=out, last=True)
    return s.emit("permute", x, shape=out, last=True, perm=perm)


def _swap(rank: int, a: object, b: object) -> tuple[int, ...]:
    perm = list(range(rank))
    i, j = (int(str(d)) % max(rank, 1) for d in (a, b))
    perm[i], perm[j] = perm[j], perm[i]
    return tuple(perm)


@register("transpose", "swapaxes", "swapdims")
def _transpose(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    return permuted(s, x, _swap(rank, get(a, k, 1, "dim0"), get(a, k, 2, "dim1")))


@register("t", "mT")
def _t(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    return permuted(s, x, _swap(rank, -1, -2) if rank >= 2 else tuple(range(rank)))


@register("T")
def _reverse(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    return permuted(s, x, tuple(reversed(range(len(s.shape(x))))))


@register("permute")
def _permute(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    dims = get(a, k, 1, "dims")
    items = list(dims) if isinstance(dims, list | tuple) else list(a[1:])
    return permuted(s, x, tuple(int(str(d)) % max(rank, 1) for d in items))


@register("movedim", "moveaxis")
def _movedim(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    rank = len(s.shape(x))
    src, dst = get(a, k, 1, "source"), get(a, k, 2, "destination")
    srcs = [int(str(d)) % rank for d in (src if isinstance(src, list | tuple) else [src])]
    dsts = [int(str(d)) % rank for d in (dst if isinstance(dst, list | tuple) else [dst])]
    perm: list[int | None] = [None] * rank
    for i, j in zip(srcs, dsts, strict=True):
        perm[j] = i
    rest = iter(d for d in range(rank) if d not in srcs)
    return permuted(s, x, tuple(p if p is not None else next(rest) for p in perm))


@register("flip", "fliplr", "flipud")
def _flip(s: Sink, a: list[object], k: dict[str, object]) -> object:
    # the scan fold (scanops.fold_flip) looks for a one-dim flip by its `dim`
    from nkibot.lowering.frontend.scanops import fold_flip

    x = tensor(a[0])
    dims = norm_dims(get(a, k, 1, "dims"), len(s.shape(x)))
    folded = fold_flip(s, x, dims)
    if folded is not None:
        return folded
    attrs: dict[str, object] = {"dims": dims, **({"dim": dims[0]} if len(dims) == 1 else {})}
    return s.emit("flip", x, shape=s.shape(x), last=True, **attrs)


@register("select")
def _select(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    shape = s.shape(x)
    dim = norm_dims(get(a, k, 1, "dim"), len(shape))[0]
    index = int(str(get(a, k, 2, "index", 0))) % shape[dim]
    return s.emit("select", x, shape=out_shape(k), last=True, dim=dim, index=index)


@register("expand", "expand_as", "broadcast_to")
def _expand(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    out = out_shape(k)
    if isinstance(x, Ref) and len(s.shape(x)) < len(out):  # expand adds leading dims
        x = s.emit("view", x, shape=(1,) * (len(out) - len(s.shape(x))) + s.shape(x))
    return s.emit("expand", x, shape=out, last=True)


@register("unbind")
def _unbind(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    shape = s.shape(x)
    dim = norm_dims(get(a, k, 1, "dim", 0), len(shape))[0]
    out = tuple(d for i, d in enumerate(shape) if i != dim)
    return tuple(s.emit("select", x, shape=out, dim=dim, index=i) for i in range(shape[dim]))


@register("chunk", "split", "tensor_split", "split_with_sizes")
def _chunk(s: Sink, a: list[object], k: dict[str, object]) -> object:
    x = tensor(a[0])
    shapes: list[tuple[int, ...]] = k["__shapes"]  # type: ignore[assignment]
    shape = s.shape(x)
    rank = len(shape)
    dim = norm_dims(get(a, k, 2, "dim", 0), rank)[0]
    if any(sh[:dim] + sh[dim + 1:] != shape[:dim] + shape[dim + 1:] for sh in shapes):
        raise Unsupported("aten.split.Tensor", "parts that differ off the split dim")
    out, start = [], 0
    for sh in shapes:
        op = "slice" if dim == rank - 1 else "narrow"  # a last-dim window is read in place
        out.append(s.emit(op, x, shape=sh, start=start, dim=dim))
        start += sh[dim]
    return tuple(out)


def subscript(s: Sink, x: Arg, index: object, shape: tuple[int, ...]) -> Ref:
    """x[index] for basic indexing (ints, slices with a positive step, None, ...)."""
    items = index if isinstance(index, tuple) else (index,)
    spec: list[tuple[object, ...]] = []
    for item in items:
        if item is None:
            spec.append(("none",))
        elif item is Ellipsis:
            spec.append(("ellipsis",))
        elif isinstance(item, Ref):
            raise Unsupported("aten.index.Tensor", "indexing with a tensor")
        elif isinstance(item, bool) or not isinstance(item, int | slice):
            raise Unsupported("aten.index.Tensor", f"indexing with {type(item).__name__}")
        elif isinstance(item, int):
            spec.append(("int", item))
        else:
            spec.append(("slice", item.start, item.stop, item.step))
    return s.emit("subscript", x, shape=shape, last=True, index=tuple(spec))


@register("subscript")
def _subscript(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return subscript(s, tensor(a[0]), a[1], out_shape(k))


@register("stack")
def _stack(s: Sink, a: list[object], k: dict[str, object]) -> object:
    parts = get(a, k, 0, "tensors")
    items = [tensor(p) for p in (parts if isinstance(parts, list | tuple) else [])]
    out = out_shape(k)
    dim = norm_dims(get(a, k, 1, "dim", 0), len(out))[0]
    if not items or not all(isinstance(p, Ref) for p in items):
        raise Unsupported("aten.stack.default", "parts that are not tensors")
    views = [s.emit("view", p, shape=(*s.shape(p)[:dim], 1, *s.shape(p)[dim:])) for p in items]
    return s.emit("cat", *views, shape=out, last=True, dim=dim)


@register("unfold")
def _unfold(s: Sink, a: list[object], k: dict[str, object]) -> object:
    """Tensor.unfold(dim, size, step) with step == size: non-overlapping windows are a view
    (dim split into windows x size) and a permute (size moved last); trailing elements no
    window covers are left out first."""
    x = tensor(a[0])
    shape = s.shape(x)
    dim = norm_dims(get(a, k, 1, "dimension"), max(len(shape), 1))[0]
    size, step = (int(str(get(a, k, i, name))) for i, name in ((2, "size"), (3, "step")))
    if step != size:
        why = "overlapping windows (step < size)" if step < size else "gaps (step > size)"
        raise Unsupported("aten.unfold.default", f"{why}; windows with step == size are "
                                                 "lowered")
    count = shape[dim] // size
    if count * size != shape[dim]:
        x = s.emit("slice" if dim == len(shape) - 1 else "narrow", x,
                   shape=(*shape[:dim], count * size, *shape[dim + 1:]), start=0, dim=dim)
    split_shape = (*shape[:dim], count, size, *shape[dim + 1:])
    if dim == len(shape) - 1:  # the window is already the last dim
        return s.emit("view", x, shape=split_shape, last=True)
    split = s.emit("view", x, shape=split_shape)
    rank = len(shape) + 1
    return permuted(s, split, (*range(dim + 1), *range(dim + 2, rank), dim + 1))
