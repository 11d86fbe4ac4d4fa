"""Max and average pooling (1-D, 2-D, 3-D) on the Vector Engine over strided SBUF windows.

Rows (batch x channels) sit on the partitions, each row's padded plane in the free
dims: padding is the pool's identity (-3e38 for max, 0 for average, as PyTorch pads),
and every kernel tap is one strided view of the plane (start `o * stride + k *
dilation`) folded into the accumulator with `nisa.tensor_tensor`. `ceil_mode` only
changes the output extent, which the plane covers with more padding.
"""

from __future__ import annotations

import math

from nkibot.convert.models.lowering.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.convert.models.lowering.conv import Dim
from nkibot.convert.models.lowering.ir import Op, Ref
from nkibot.convert.models.lowering.layout import LayoutError, Resolved
from nkibot.convert.models.lowering.rowwise import Kernel, Output

PLANE_BUDGET = 96 * 1024  # bytes per partition for the input plane
TILE_ELEMS = 4096  # output elements per partition per tile
FILL = {"max": "-3.0e38", "avg": "0.0"}
FOLD = {"max": "nl.maximum", "avg": "nl.add"}


def _ints(value: object, n: int) -> tuple[int, ...]:
    items = value if isinstance(value, tuple | list) else (value,) * n
    return tuple(int(str(v)) for v in items)


def pool_dims(op: Op, x_shape: tuple[int, ...]) -> tuple[Dim, ...]:
    n = len(x_shape) - 2
    taps = _ints(op.attr("kernel"), n)
    stride, pad = _ints(op.attr("stride"), n), _ints(op.attr("padding", 0), n)
    dil = _ints(op.attr("dilation", 1), n)
    return tuple(Dim(x_shape[2 + i], op.shape[2 + i], taps[i], stride[i], dil[i], 1, pad[i])
                 for i in range(n))


def _source(res: Resolved, arg: object) -> tuple[str, tuple[int, ...], str]:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError("pooling of a computed value; only a pooled input is lowered")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced or view.shape != view.leaf.shape:
        raise LayoutError("pooling of a view of an input")
    return view.leaf.name, view.leaf.shape, view.leaf.dtype


def emit_pool(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1:
        raise LayoutError("pooling with other ops in the graph (a lone pool is lowered)")
    op = res.ops[0]
    kind = str(op.attr("kind"))
    x, shape, _dtype = _source(res, op.args[0])
    dims = pool_dims(op, shape)
    if kind == "avg" and any(d.plane > d.size_in + 2 * d.lead for d in dims):
        raise LayoutError("average pooling whose ceil_mode windows overhang the padding "
                          "(their divisor shrinks)")
    plane = math.prod(d.plane for d in dims)
    if plane * 4 > PLANE_BUDGET:
        raise LayoutError(f"pooling plane of {plane} elements per row exceeds the SBUF budget")
    rows = shape[0] * shape[1]
    tile_fn = _emit_tile(kernel, dims, kind, op, outputs[0].dtype)
    rows_fn = _emit_rows(kernel, dims, kind, tile_fn)
    body = kernel.body
    body.comment(f"{op.origin}: batch x channels on partitions, each row's plane in the free dims")
    body.line(f"x_v = {x}.reshape(({rows}, {', '.join(str(d.size_in) for d in dims)}))")
    body.line(f"out_v = {outputs[0].var}.reshape(({rows}, "
              f"{', '.join(str(d.size_out) for d in dims)}))")
    emit_grid(body, [Axis("r", rows, PMAX)], f"{rows_fn}(x_v, out_v, {{r0}}, {{rsz}})",
              "affine_range")


def _emit_rows(kernel: Kernel, dims: tuple[Dim, ...], kind: str, tile_fn: str) -> str:
    fn = kernel.names.fresh("pool_rows")
    blk = Block(depth=1)
    plane = ", ".join(str(d.plane) for d in dims)
    blk.line(f"x_sb = nl.ndarray((p, {plane}), dtype=nl.float32, buffer=nl.sbuf)")
    if any(d.plane != d.size_in or d.lead for d in dims):
        blk.comment("padding holds the pool's identity")
        blk.line(f"nisa.memset(dst=x_sb, value={FILL[kind]})")
    placed = [d.placed() for d in dims]
    dst = ", ".join(f"{start}:{start + count}" for _, count, start in placed)
    src = ", ".join(f"{first}:{first + count}" for first, count, _ in placed)
    blk.line(f"nisa.dma_copy(dst=x_sb[0:p, {dst}], src=x_v[nl.ds(r0, p), {src}])")
    rest = math.prod(d.size_out for d in dims[1:])
    block = max(1, min(dims[0].size_out, TILE_ELEMS // max(rest, 1)))
    emit_grid(blk, [Axis("a", dims[0].size_out, block)],
              f"{tile_fn}(x_sb, out_v, r0, p, {{a0}}, {{asz}})", "affine_range")
    kernel.helpers.append([f"def {fn}(x_v, out_v, r0, p):",
                           '    """Rows r0..r0+p: load their padded planes once, pool every '
                           'output tile."""', *blk.lines])
    return fn


def _emit_tile(kernel: Kernel, dims: tuple[Dim, ...], kind: str, op: Op, out_dtype: str) -> str:
    fn = kernel.names.fresh("pool_tile")
    blk = Block(depth=1)
    extents = ["asz", *(str(d.size_out) for d in dims[1:])]
    shape = ", ".join(extents)
    blk.line(f"acc = nl.ndarray((p, {shape}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"nisa.memset(dst=acc, value={FILL[kind]})")
    taps = [f"k{i}" for i in range(len(dims))]
    for k, d in zip(taps, dims, strict=True):
        blk.line(f"for {k} in nl.sequential_range({d.taps}):")
        blk.indent()
    windows = []
    for i, (k, d) in enumerate(zip(taps, dims, strict=True)):
        base = "a0" if i == 0 else "0"
        start = f"{base} * {d.step} + {k} * {d.dil}" if d.step > 1 else f"{base} + {k} * {d.dil}"
        count = extents[i]
        stop = f"({count} - 1) * {d.step} + 1" if d.step > 1 else count
        windows.append(f"{start}:{start} + {stop}" + (f":{d.step}" if d.step > 1 else ""))
    blk.comment(f"{kind} over the taps: one strided window of the plane each")
    blk.line(f"nisa.tensor_tensor(dst=acc, data1=acc, data2=x_sb[0:p, {', '.join(windows)}], "
             f"op={FOLD[kind]})")
    for _ in taps:
        blk.dedent()
    blk.line(f"res = nl.ndarray((p, {shape}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if kind == "avg":
        divisor = op.attr("divisor") or math.prod(d.taps for d in dims)
        blk.line(f"nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, "
                 f"operand0={1.0 / float(str(divisor))!r})")
    else:
        blk.line("nisa.tensor_copy(dst=res, src=acc)")
    rest = ", ".join(f"0:{d.size_out}" for d in dims[1:])
    index = "nl.ds(a0, asz)" + (f", {rest}" if rest else "")
    blk.line(f"nl.store(out_v[nl.ds(r0, p), {index}], res)")
    kernel.helpers.append([f"def {fn}(x_sb, out_v, r0, p, a0, asz):",
                           f'    """{op.origin}: output positions a0..a0+asz (first spatial '
                           'dim) of rows r0..r0+p."""', *blk.lines])
    return fn
