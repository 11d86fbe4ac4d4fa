"""Graph rewrites the scheduler applies before cutting a graph into stages.

`expand_norms`: a block normalisation too big for its emitter becomes its row reductions
and elementwise ops (below).

`split_long_reductions`: a row reduction over more elements than one SBUF row holds
(`LONG_ROW`) becomes two, as inductor's split reductions do: the row seen as `k` chunks
(a reshape), each chunk reduced, then the `k` partials reduced. Each half is an ordinary
row reduction the row-wise emitter tiles, and the scheduler puts them in two stages
joined by a small HBM scratch tensor of partials.

`split_wide_convs`: a convolution contracting over more than 128 input channels (one
group) becomes a sum of convolutions over channel chunks of at most 128 (the input and
the weight narrowed to each chunk, the bias on the first), each an ordinary conv stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from nkibot.lowering.frontend.ir import Arg, Graph, Op, Ref
from nkibot.lowering.schedule.layout import LayoutError

LONG_ROW = 16384  # elements: two fp32 rows of this length take 128 KiB of a partition
CHUNK = 4096  # the longest chunk a split row is cut into (16 KiB of fp32)
SPLIT = frozenset({"rsum", "rmax", "rmin"})
PMAX = 128  # partitions: the most input channels one conv contracts on the PE


def _trailing(op: Op, shape: tuple[int, ...]) -> bool:
    dims = sorted(d % len(shape) for d in op.dims) if shape else []
    return bool(dims) and dims == list(range(dims[0], len(shape)))


def _chunks(size: int) -> int:
    """The fewest chunks (a divisor of `size`) of at most CHUNK elements, or 0."""
    return next((k for k in range(-(-size // CHUNK), size + 1) if size % k == 0
                 and size // k <= CHUNK), 0)


def split_long_reductions(graph: Graph) -> Graph:
    """The graph with each long trailing-dims reduction split in two (see module doc)."""
    ops: list[Op] = []
    for op in graph.ops:
        src = op.args[0] if op.args else None
        shape = graph.shape_of(src) if isinstance(src, Ref) else ()
        size = math.prod(shape[min(op.dims, default=0):]) if op.dims else 0
        if op.op not in SPLIT or not isinstance(src, Ref) or not _trailing(op, shape) or (
                size <= LONG_ROW) or not (k := _chunks(size)):
            ops.append(op)
            continue
        outer = shape[:min(op.dims)]
        n = len(outer)
        chunked = Op(f"{op.name}_chunks", "view", (src,), (*outer, k, size // k), op.dtype,
                     op.origin)
        part = Op(f"{op.name}_part", op.op, (Ref(chunked.name),), (*outer, k, 1), op.dtype,
                  op.origin, (("dims", (n + 1,)),))
        # the partials keep the reduced dims' rank, so the total has the op's own shape
        ones = (1,) * (len(shape) - n - 1)
        flat = Op(f"{op.name}_parts", "view", (Ref(part.name),), (*outer, k, *ones), op.dtype,
                  op.origin)
        ops += [chunked, part, flat, replace(op, args=(Ref(flat.name),), attrs=(("dims", (n,)),))]
    return Graph(graph.leaves, ops, graph.outputs, graph.constants)


def expand_norms(graph: Graph, lowers_alone: Callable[[Op], bool]) -> Graph:
    """The graph with each GroupNorm/LayerNorm block normalisation that does not lower as
    its own stage (its blocks exceed SBUF) written as row reductions and elementwise ops
    (an eval BatchNorm over more than 128 channels as elementwise ops alone):
    the rows are its blocks (the mean, then the centred variance: two passes, no
    E[x^2] - mean^2 cancellation), which the scheduler stages (and splits when long).
    A BatchNorm with batch statistics that its emitter refuses is declined (LayoutError)."""
    ops: list[Op] = []
    for op in graph.ops:
        kind = op.attr("kind")
        if op.op == "blocknorm" and kind == "batch_train" and not lowers_alone(op):
            raise LayoutError(
                f"{op.origin}: BatchNorm with batch statistics (training mode) over "
                f"{op.shape[1]} channels of {math.prod(op.shape[2:])} positions does not fit "
                "(up to 128 channels, rows within the SBUF budget): call model.eval() to use "
                "the running statistics, or pass smaller shapes")
        segmented = _segment_ops(op) if op.op == "blocknorm" and kind == "group" else None
        if segmented is not None and lowers_alone(segmented[0]):
            ops += segmented
        elif op.op != "blocknorm" or kind not in ("group", "layer", "batch") or lowers_alone(op):
            ops.append(op)
        elif kind == "batch":
            ops += _batch_ops(op)
        else:
            ops += _norm_ops(op, str(kind))
    return Graph(graph.leaves, ops, graph.outputs, graph.constants)


def _batch_ops(op: Op) -> list[Op]:
    """An eval BatchNorm (running statistics) as elementwise ops: (x - mean) * rsqrt(var +
    eps), then weight and bias, each per-channel [C] tensor viewed as [C, 1, ...]."""
    shape, (x, mean, var, *params) = op.shape, op.args
    channel = (shape[1], *(1,) * (len(shape) - 2))
    ops: list[Op] = []

    def emit(suffix: str, name: str, args: tuple[Arg, ...], out: tuple[int, ...]) -> Ref:
        ops.append(Op(f"{op.name}_{suffix}", name, args, out, op.dtype, op.origin))
        return Ref(ops[-1].name)

    mean_v = emit("mean", "view", (mean,), channel)
    vareps = emit("vareps", "add", (emit("var", "view", (var,), channel),
                                    float(str(op.attr("eps")))), channel)
    inv = emit("inv", "rsqrt", (vareps,), channel)
    y = emit("normed", "mul", (emit("centred", "sub", (x, mean_v), shape), inv), shape)
    for i, (param, fold) in enumerate(zip(params, ("mul", "add"), strict=False)):
        y = emit(f"affine{i}", fold, (y, emit(f"param{i}", "view", (param,), channel)), shape)
    last = ops.pop()
    return [*ops, replace(last, name=op.name)]


def _segment_ops(op: Op) -> list[Op] | None:
    """A GroupNorm of a [N, C] value (no positions after the channels) as one `segnorm`:
    each row's groups are runs of C / G consecutive elements, normalised where they lie
    (emit/rowstats.segments), then the weight and bias per column. With no [N, G, C / G]
    view the value keeps the row layout of the op that made it, so a matmul's epilogue
    takes the norm into its output tiles. None for any other GroupNorm."""
    shape, x = op.shape, op.args[0]
    if len(shape) < 2 or math.prod(shape[2:]) != 1:
        return None
    size = shape[1] // int(str(op.attr("groups")))
    normed = Op(f"{op.name}_normed", "segnorm", (x,), shape, "float32", op.origin,
                (("eps", float(str(op.attr("eps")))), ("size", size)))
    return _with_affine(op, [normed], Ref(normed.name), (shape[1], *(1,) * (len(shape) - 2)))


def _with_affine(op: Op, ops: list[Op], y: Ref, affine: tuple[int, ...]) -> list[Op]:
    """`ops`, whose last value `y` is the normalised tensor, then the norm's weight and
    bias (its args after the input) each viewed as `affine` and applied; the last op takes
    the norm's name and dtype."""
    for i, (param, fold) in enumerate(zip(op.args[1:], ("mul", "add"), strict=False)):
        assert isinstance(param, Ref)
        view = Op(f"{op.name}_param{i}", "view", (param,), affine, "float32", op.origin)
        ops += [view, Op(f"{op.name}_affine{i}", fold, (y, Ref(view.name)), op.shape,
                         "float32", op.origin)]
        y = Ref(ops[-1].name)
    last = ops.pop()
    return [*ops, replace(last, name=op.name, dtype=op.dtype)]


def _norm_ops(op: Op, kind: str) -> list[Op]:
    shape, x = op.shape, op.args[0]
    rows: tuple[int, ...]
    if kind == "group":
        groups = int(str(op.attr("groups")))
        rows = (shape[0], groups)
        affine = (shape[1], *(1,) * (len(shape) - 2))
    else:
        count = int(str(op.attr("count")))
        rows = shape[:len(shape) - count]
        affine = shape[len(shape) - count:]
    size = math.prod(shape) // math.prod(rows)
    eps = float(str(op.attr("eps")))
    n, row = len(rows), (*rows, size)
    ops: list[Op] = []

    def emit(suffix: str, name: str, args: tuple[Arg, ...], out: tuple[int, ...],
             **attrs: object) -> Ref:
        ops.append(Op(f"{op.name}_{suffix}", name, args, out, "float32", op.origin,
                      tuple(attrs.items())))
        return Ref(ops[-1].name)

    xv = emit("rows", "view", (x,), row)
    mean = emit("mean", "mul", (emit("sum", "rsum", (xv,), (*rows, 1), dims=(n,)),
                                1.0 / size), (*rows, 1))
    centred = emit("centred", "sub", (xv, mean), row)
    var = emit("var", "mul", (emit("sqsum", "rsum", (emit("sq", "square", (centred,), row),),
                                   (*rows, 1), dims=(n,)), 1.0 / size), (*rows, 1))
    rstd = emit("rstd", "rsqrt", (emit("vareps", "add", (var, eps), (*rows, 1)),), (*rows, 1))
    y = emit("normed", "view", (emit("scaled", "mul", (centred, rstd), row),), shape)
    return _with_affine(op, ops, y, affine)


def split_wide_convs(graph: Graph) -> Graph:
    """The graph with each convolution over more than PMAX input channels a group written
    as a sum over channel chunks (see module doc); a grouped one is first one conv per
    group, concatenated along the channels. The partial results are fp32; the last op
    takes the conv's name and dtype."""
    return _chunk_convs(_ungroup_wide_convs(graph))


def _ungroup_wide_convs(graph: Graph) -> Graph:
    ops: list[Op] = []
    for op in graph.ops:
        x, w = (*op.args, None, None)[:2]
        groups = int(str(op.attr("groups", 1)))
        if (op.op != "conv" or not isinstance(x, Ref) or not isinstance(w, Ref)
                or groups == 1 or graph.shape_of(x)[1] // groups <= PMAX):
            ops.append(op)
            continue
        x_shape, w_shape = graph.shape_of(x), graph.shape_of(w)
        cin_g, cout_g = x_shape[1] // groups, op.shape[1] // groups
        # weight [Cout, Cin/g, K...], or [Cin, Cout/g, K...] when transposed
        w_rows = cin_g if op.attr("transposed", False) else cout_g
        attrs = tuple((k, 1 if k == "groups" else v) for k, v in op.attrs)
        parts = []
        for g in range(groups):
            xs = Op(f"{op.name}_g{g}x", "narrow", (x,), (x_shape[0], cin_g, *x_shape[2:]),
                    _dtype(graph, x), op.origin, (("start", g * cin_g), ("dim", 1)))
            ws = Op(f"{op.name}_g{g}w", "narrow", (w,), (w_rows, *w_shape[1:]),
                    _dtype(graph, w), op.origin, (("start", g * w_rows), ("dim", 0)))
            args: tuple[Arg, ...] = (Ref(xs.name), Ref(ws.name))
            ops += [xs, ws]
            if len(op.args) > 2 and isinstance(op.args[2], Ref):
                ops.append(Op(f"{op.name}_g{g}b", "narrow", (op.args[2],), (cout_g,),
                              _dtype(graph, op.args[2]), op.origin,
                              (("start", g * cout_g), ("dim", 0))))
                args += (Ref(ops[-1].name),)
            ops.append(Op(f"{op.name}_g{g}", "conv", args, (op.shape[0], cout_g, *op.shape[2:]),
                          "float32", op.origin, attrs))
            parts.append(Ref(ops[-1].name))
        ops.append(Op(op.name, "cat", tuple(parts), op.shape, op.dtype, op.origin,
                      (("dim", 1),)))
    return Graph(graph.leaves, ops, graph.outputs, graph.constants)


def _chunk_convs(graph: Graph) -> Graph:
    ops: list[Op] = []
    for op in graph.ops:
        x, w = (*op.args, None, None)[:2]
        if (op.op != "conv" or not isinstance(x, Ref) or not isinstance(w, Ref)
                or graph.shape_of(x)[1] <= PMAX or op.attr("groups", 1) != 1):
            ops.append(op)
            continue
        cin = graph.shape_of(x)[1]
        k = -(-cin // PMAX)
        sizes = [cin // k + (i < cin % k) for i in range(k)]
        w_dim = 0 if op.attr("transposed", False) else 1
        x_shape, w_shape = graph.shape_of(x), graph.shape_of(w)
        total: Ref | None = None
        start = 0
        for i, size in enumerate(sizes):
            xs = Op(f"{op.name}_x{i}", "narrow", (x,), (*x_shape[:1], size, *x_shape[2:]),
                    _dtype(graph, x), op.origin, (("start", start), ("dim", 1)))
            ws = Op(f"{op.name}_w{i}", "narrow", (w,),
                    tuple(size if d == w_dim else n for d, n in enumerate(w_shape)),
                    _dtype(graph, w), op.origin, (("start", start), ("dim", w_dim)))
            bias = op.args[2:] if i == 0 else ()
            part = Op(f"{op.name}_part{i}", "conv", (Ref(xs.name), Ref(ws.name), *bias),
                      op.shape, "float32", op.origin, op.attrs)
            ops += [xs, ws, part]
            if total is not None:
                last = i == k - 1
                ops.append(Op(op.name if last else f"{op.name}_sum{i}", "add",
                              (total, Ref(part.name)), op.shape,
                              op.dtype if last else "float32", op.origin))
                total = Ref(ops[-1].name)
            else:
                total = Ref(part.name)
            start += size
    return Graph(graph.leaves, ops, graph.outputs, graph.constants)


def _dtype(graph: Graph, ref: Ref) -> str:
    found = graph.leaf(ref.name) or graph.op(ref.name)
    assert found is not None, ref.name
    return found.dtype
