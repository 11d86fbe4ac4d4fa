"""Where each value of a graph lives in a tiled kernel: its kind and its stage.

Every tensor is seen through one 3-D view `(O, R, C)` of the main shape S: O outer
(looped) rows, R rows tiled over partitions, C columns in the free dimension. A value
is FULL `[p, q]`, ROW `[p, 1]` (broadcast along columns, e.g. a row reduction), COL
`[1, q]` (e.g. a LayerNorm weight), ONE `[1, 1]`, or TOTAL (a reduction over the whole
tensor, computed after a loop). A value that needs a TOTAL computed first belongs to
a later stage: one more pass over the tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from nkibot.lowering.frontend import strided
from nkibot.lowering.frontend.ir import REDUCE, Graph, Leaf, Op, Ref
from nkibot.lowering.frontend.strided import Strided

FULL, ROW, COL, ONE, TOTAL = "full", "row", "col", "one", "total"
MIN_COLS = 512  # preferred shortest row of a tile: 2 KiB of fp32 per partition per DMA


class LayoutError(Exception):
    """The graph does not fit a tiled layout; the message names why."""


@dataclass(frozen=True)
class LeafView:
    """A kernel argument seen with another shape, a column window, or transposed."""

    leaf: Leaf
    shape: tuple[int, ...]
    col_start: int = 0
    transposed: bool = False
    sliced: bool = False  # a column window of the leaf (chunk/split on the last dim)
    #: the view as one access pattern of the leaf (None: not one strided pattern)
    strided: Strided | None = None
    #: a layout (permute, flip, select, expand, ...) no emitter reads in place: it is
    #: copied to HBM scratch first (`resolve`), or straight into an output
    general: bool = False

    @property
    def base_cols(self) -> int:
        return self.leaf.shape[-1] if self.leaf.shape else 1


@dataclass
class Resolved:
    """Graph with view chains on leaves folded into LeafViews and copies into aliases."""

    graph: Graph
    views: dict[str, LeafView] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)  # op name -> the op it re-labels
    ops: list[Op] = field(default_factory=list)  # the ops that compute something
    #: views copied to HBM scratch before the emitters run: view name -> the view as
    #: it was (its `strided` pattern of its leaf); res.views holds the scratch tensor
    scratch: dict[str, LeafView] = field(default_factory=dict)

    def target(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        name = self.target(name)
        if name in self.views:
            return self.views[name].shape
        return self.graph.shape_of(Ref(name))


VIEW_OPS = ("view", "copy", "slice", "transpose", "permute", "flip", "narrow", "select",
            "expand", "subscript")


def resolve(graph: Graph) -> Resolved:
    res = Resolved(graph)
    for leaf in graph.leaves:
        res.views[leaf.name] = LeafView(leaf, leaf.shape, strided=strided.source(leaf.shape))
    for op in graph.ops:
        src = op.args[0] if op.args else None
        source = res.target(src.name) if isinstance(src, Ref) else None
        if op.op in VIEW_OPS and source in res.views:
            view = _view_of(res.views[source], op)
            if view is None:  # not one pattern of the leaf: copy the source out first
                _to_scratch(res, source)
                view = _view_of(res.views[source], op)
            if view is None:
                raise LayoutError(f"{op.origin or op.op}: {op.op} of a view")
            res.views[op.name] = view
        elif op.op == "copy" and source is not None:
            res.alias[op.name] = source
        else:
            res.ops.append(op)
    for name, view in list(res.views.items()):
        users = [op for op in res.ops if name in _arg_names(res, op)]
        if users and (view.general or (view.transposed and any(
                u.op != "matmul" and not (u.op == "attention" and last_two_swapped(view))
                for u in users))):
            _to_scratch(res, name)
    return res


def last_two_swapped(view: LeafView) -> bool:
    """The view is its whole leaf with the last two dims swapped (read in place by matmul
    and attention, which take either layout of an operand)."""
    pat = view.strided
    if pat is None or pat.offset or len(view.shape) < 2 or len(view.leaf.shape) < 2:
        return False
    want = strided.contiguous_strides(view.leaf.shape)
    swapped = (*want[:-2], want[-1], want[-2])
    lshape = view.leaf.shape
    # a dim of one element has no stride that matters (NumPy reports 0)
    return tuple(view.shape) == (*lshape[:-2], lshape[-1], lshape[-2]) and all(
        n == 1 or a == b for n, a, b in zip(view.shape, pat.strides, swapped, strict=True))


def scratch_name(res: Resolved, name: str) -> str:
    taken = {leaf.name for leaf in res.graph.leaves} | {
        v.leaf.name for v in res.views.values()}
    base, n = f"{name}_copy", 1
    out = base
    while out in taken:
        n += 1
        out = f"{base}{n}"
    return out


def _to_scratch(res: Resolved, name: str) -> None:
    """Read the view `name` from a contiguous HBM scratch copy from now on."""
    view = res.views[name]
    if view.strided is None:
        raise LayoutError(f"{name}: a layout with no access pattern")
    leaf = Leaf(scratch_name(res, name), view.shape, view.leaf.dtype, "scratch", name)
    res.scratch[name] = view
    res.views[name] = LeafView(leaf, view.shape, strided=strided.source(view.shape))


def _view_of(view: LeafView, op: Op) -> LeafView | None:
    pattern = None if view.strided is None else strided.apply(
        view.strided, op.op, op.shape, **dict(op.attrs))
    if not view.general and op.op in ("view", "copy", "slice", "transpose"):
        try:
            return replace(_legacy_view(view, op), strided=pattern)
        except LayoutError:
            pass
    if pattern is None:
        return None
    if pattern.contiguous and math.prod(op.shape) == math.prod(view.leaf.shape):
        # e.g. x.t().t(): the leaf itself, reshaped
        return LeafView(view.leaf, op.shape, strided=pattern)
    return LeafView(view.leaf, op.shape, strided=pattern, general=True)


def _legacy_view(view: LeafView, op: Op) -> LeafView:
    """The views the emitters read in place: reshapes, a last-dim window, a transpose."""
    if op.op == "slice":
        if view.shape != view.leaf.shape or view.transposed:
            raise LayoutError("a slice of a reshaped input")
        return LeafView(view.leaf, op.shape, col_start=op.start, sliced=True)
    if op.op == "transpose":
        if view.transposed or view.sliced:
            raise LayoutError("a transpose of a transposed or sliced input")
        return LeafView(view.leaf, op.shape, transposed=True)
    if view.sliced or view.transposed:
        if op.op == "copy":
            return view
        raise LayoutError("a reshape of a sliced or transposed input")
    return LeafView(view.leaf, op.shape)


@dataclass(frozen=True)
class Frame:
    """The (O, R, C) split of the main shape S at dims a (outer|rows) and b (rows|cols).

    `perm` (torch dim order -> S order) is set when a middle dim is reduced: S moves it
    last, and HBM views are permuted so that it lands in the free dimension.
    """

    shape: tuple[int, ...]
    a: int
    b: int
    perm: tuple[int, ...] | None = None

    def order(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A torch-order shape (right-aligned to S's rank) in S order."""
        n = len(self.shape)
        padded = (1,) * (n - len(shape)) + tuple(shape)
        return tuple(padded[i] for i in self.perm) if self.perm else padded

    @property
    def outer(self) -> int:
        return math.prod(self.shape[: self.a])

    @property
    def rows(self) -> int:
        return math.prod(self.shape[self.a : self.b])

    @property
    def cols(self) -> int:
        return math.prod(self.shape[self.b :])

    def classify(self, shape: tuple[int, ...]) -> tuple[str, bool] | None:
        """(kind, varies along outer) of a tensor of `shape` broadcast against S."""
        n = len(self.shape)
        if len(shape) > n:
            if math.prod(shape[: len(shape) - n]) != 1:
                return None
            shape = shape[len(shape) - n :]
        s = self.order(shape)
        parts = (s[: self.a], s[self.a : self.b], s[self.b :])
        full = (self.shape[: self.a], self.shape[self.a : self.b], self.shape[self.b :])
        varies = []
        for part, whole in zip(parts, full, strict=True):
            if part == whole:
                varies.append(True)
            elif math.prod(part) == 1:
                varies.append(False)
            else:
                return None
        kind = {(True, True): FULL, (True, False): ROW, (False, True): COL,
                (False, False): ONE}[(varies[1], varies[2])]
        return kind, varies[0] and self.outer > 1


@dataclass
class Placement:
    frame: Frame
    kinds: dict[str, str] = field(default_factory=dict)
    outer_varies: dict[str, bool] = field(default_factory=dict)
    stage: dict[str, int] = field(default_factory=dict)
    col_reduce: bool = False
    #: ROW values whose shape dropped the reduced dims (keepdim=False): S[:b].
    squeezed: set[str] = field(default_factory=set)


def _join(kinds: list[str]) -> str:
    rowish = any(k in (FULL, ROW) for k in kinds)
    colish = any(k in (FULL, COL) for k in kinds)
    return {(True, True): FULL, (True, False): ROW, (False, True): COL}.get((rowish, colish), ONE)


def place(res: Resolved, frame: Frame, outputs: list[str],
          seed: dict[str, str] | None = None) -> Placement:
    """Kinds and stages for every value, or LayoutError naming the first misfit.

    `seed` gives kinds of values computed outside the tile emitter (a matmul result).
    """
    pl = Placement(frame)
    for name, kind in (seed or {}).items():
        pl.kinds[name], pl.stage[name], pl.outer_varies[name] = kind, 0, False
    for name, view in res.views.items():
        found = frame.classify(view.shape)
        if found is not None and not view.transposed:
            pl.kinds[name], pl.outer_varies[name] = found
            pl.stage[name] = 0
    for op in res.ops:
        if op.name not in (seed or {}):
            _place_op(res, pl, op, outputs)
    return pl


def _arg_names(res: Resolved, op: Op) -> list[str]:
    return [res.target(a.name) for a in op.args if isinstance(a, Ref)]


def _place_op(res: Resolved, pl: Placement, op: Op, outputs: list[str]) -> None:
    names = _arg_names(res, op)
    for name in names:
        if name not in pl.kinds:
            why = "a transposed input" if res.views.get(name, None) and res.views[
                name].transposed else f"{name} of shape {list(res.shape(name))}"
            raise LayoutError(f"{op.origin or op.op}: cannot place {why} in a row layout")
    kinds = [pl.kinds[n] for n in names]
    stage = max((pl.stage[n] + (1 if pl.kinds[n] == TOTAL else 0) for n in names), default=0)
    if op.op in REDUCE:
        kind, stage = _reduce_kind(res, pl, op, names[0]), max(
            (pl.stage[n] for n in names), default=0)
    elif op.op == "iota":  # column indices: one row, broadcast down the partitions
        found = pl.frame.classify(op.shape)
        if found is None or found[0] != COL:
            raise LayoutError(f"{op.origin}: class indices must run along the free dim")
        kind = COL
    elif op.op in ("fill", "zeros"):  # a constant: whatever kind its shape has
        found = pl.frame.classify(op.shape)
        if found is None:
            raise LayoutError(f"{op.origin}: a constant of shape {list(op.shape)} does not fit "
                              "the layout")
        kind = found[0]
    elif op.op in ("matmul", "transpose", "slice"):
        raise LayoutError(f"{op.origin}: {op.op} inside an elementwise/row graph")
    elif op.op == "segnorm":  # runs of `size` columns along each row: whole in a row
        size = int(str(op.attr("size")))
        if kinds != [FULL] or pl.frame.perm or pl.frame.cols % size:
            raise LayoutError(f"{op.origin}: groups of {size} elements do not lie along the "
                              "rows of the layout")
        kind = FULL
    elif op.op == "view":
        kind = _view_kind(pl, op, kinds[0], outputs, names[0] in pl.squeezed)
        stage = pl.stage[names[0]]
    elif kinds and all(k in (TOTAL, ONE) for k in kinds) and TOTAL in kinds:
        kind, stage = TOTAL, max(pl.stage[n] for n in names)
    else:
        kind = _elementwise_kind(pl, op, names)
    pl.kinds[op.name], pl.stage[op.name] = kind, stage
    pl.outer_varies[op.name] = any(pl.outer_varies.get(n, False) for n in names)


def _reduce_kind(res: Resolved, pl: Placement, op: Op, src: str) -> str:
    dims = op.dims
    shape = res.shape(src)
    if math.prod(op.shape) == 1:
        if pl.kinds[src] not in (FULL, ROW):
            raise LayoutError(f"{op.origin}: whole-tensor reduction of a broadcast value")
        return TOTAL
    frame = pl.frame
    n = len(frame.shape)
    moved = tuple(sorted(frame.perm.index(d) for d in dims)) if frame.perm else dims
    if pl.kinds[src] == FULL and frame.order(shape) == frame.shape and len(shape) == n and (
            moved == tuple(range(frame.b, n))):
        pl.col_reduce = True
        return ROW
    raise LayoutError(f"{op.origin}: reduction over dims {list(dims)} of {list(shape)} does "
                      f"not match the layout")


def _elementwise_kind(pl: Placement, op: Op, names: list[str]) -> str:
    """The join of the operands' kinds, checked against the shape torch computed."""
    kind = _join([pl.kinds[n] for n in names if pl.kinds[n] != TOTAL])
    squeezed = [n for n in names if n in pl.squeezed]
    if squeezed:
        others = [n for n in names if n not in pl.squeezed and pl.kinds[n] not in (TOTAL, ONE)]
        if others:
            raise LayoutError(f"{op.origin}: mixes a reduced value with unreduced ones")
        pl.squeezed.add(op.name)
        return ROW
    found = pl.frame.classify(op.shape)
    if found is None or found[0] != kind:
        raise LayoutError(f"{op.origin}: result shape {list(op.shape)} does not fit the layout")
    return kind


def _view_kind(pl: Placement, op: Op, kind: str, outputs: list[str], squeezed: bool) -> str:
    if kind == TOTAL:
        return TOTAL
    frame = pl.frame
    if kind == ROW and tuple(op.shape) == frame.shape[: frame.b]:
        pl.squeezed.add(op.name)
        return ROW
    found = frame.classify(op.shape)
    if found is not None and found[0] == kind:
        return kind
    if op.name in outputs and kind in (FULL, ROW):
        return kind  # a reshape only on the way out: the row-major order is unchanged
    raise LayoutError(f"{op.origin}: reshape of an intermediate value to {list(op.shape)}")


def candidate_frames(res: Resolved) -> list[Frame]:
    """Layouts to try, most natural first, from the graph's reductions and shapes."""
    reductions = [op for op in res.ops if op.op in REDUCE and math.prod(op.shape) != 1]
    shapes = [op.shape for op in res.ops] or [res.shape(n) for n in res.views]
    if reductions:
        main = res.shape(res.target(reductions[0].args[0].name))  # type: ignore[union-attr]
        dims = reductions[0].dims
        if len(dims) == 1 and dims[0] < len(main) - 1:
            # a middle dim: keep the dims before it as outer loops, move it last
            k, n = dims[0], len(main)
            perm = (*range(k), *range(k + 1, n), k)
            return [Frame(tuple(main[i] for i in perm), k, n - 1, perm)]
        b_values = [min(dims)]
    else:
        totals = [op for op in res.ops if op.op in REDUCE]
        pool = [res.shape(res.target(t.args[0].name)) for t in totals] or shapes  # type: ignore[union-attr]
        main = max(pool, key=math.prod, default=())
        # innermost split first, but columns of >= 512 elements (2 KiB DMA runs) before
        # shorter ones: a whole-tensor reduction of [.., 64, 32] reads 8 KiB rows, not 128 B
        # (a column window of an input needs its own last dim as the columns)
        windowed = any(v.sliced or v.transposed for v in res.views.values())
        b_values = sorted(range(max(len(main) - 1, 0), 0, -1),
                          key=lambda b: not windowed and math.prod(main[b:]) < MIN_COLS) or [0]
    frames: list[Frame] = []
    for b in b_values:
        frames.extend(Frame(tuple(main), a, b) for a in range(b + 1) if a < b or b == 0)
    return frames
