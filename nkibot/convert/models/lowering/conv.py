"""Convolution on the Tensor Engine: a sum over kernel taps of shifted matmuls in PSUM.

For one group, batch element and output tile, every tap t contributes
`w[:, :, t].T @ window_t(x)`: the input channels (<= 128) contract on the partitions, the
output channels (<= 128 per tile) are the stationary side and up to 512 output positions
the moving side, all taps accumulating into one fp32 PSUM tile. `window_t` is a strided
view of the zero-padded input plane held in SBUF (start `o * stride + k * dilation`).

A transposed convolution is the same sum over a zero-*inserted* plane: input element i
lands at `i * stride + dilation * (K - 1) - padding`, the windows have step 1 and the taps
run flipped. Weights are loaded once per group and stay resident across batch elements
and output tiles; the input plane is loaded once per batch element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nkibot.convert.models.lowering import depthwise
from nkibot.convert.models.lowering.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.convert.models.lowering.ir import Op, Ref
from nkibot.convert.models.lowering.layout import LayoutError, Resolved
from nkibot.convert.models.lowering.rowwise import Kernel, Output

NMAX = 512  # gemm_moving_fmax: output positions per matmul (one fp32 PSUM bank)
PLANE_BUDGET = 120 * 1024  # bytes per partition for the resident input plane and weights


@dataclass(frozen=True)
class Dim:
    """One spatial dim: input/output extent, taps, and where input element i lands."""

    size_in: int
    size_out: int
    taps: int
    step: int  # window stride in the padded plane (the conv stride; 1 when transposed)
    dil: int
    up: int  # input element i lands at i * up + lead (up = stride when transposed)
    lead: int

    @property
    def plane(self) -> int:
        """Length of the padded (and zero-inserted) plane the windows read."""
        return (self.size_out - 1) * self.step + (self.taps - 1) * self.dil + 1

    def placed(self) -> tuple[int, int, int]:
        """(first input index, count, first plane index) of the input that lands in the plane."""
        lo = max(0, -(self.lead // self.up) if self.lead < 0 else 0)
        while lo * self.up + self.lead < 0:
            lo += 1
        hi = min(self.size_in, (self.plane - 1 - self.lead) // self.up + 1)
        return lo, max(hi - lo, 0), lo * self.up + self.lead


@dataclass(frozen=True)
class ConvSpec:
    batch: int
    cin: int
    cout: int
    groups: int
    dims: tuple[Dim, ...]
    transposed: bool

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def taps(self) -> int:
        return math.prod(d.taps for d in self.dims)


def _ints(value: object, n: int) -> tuple[int, ...]:
    items = value if isinstance(value, tuple | list) else (value,) * n
    return tuple(int(str(v)) for v in items)


def conv_spec(op: Op, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> ConvSpec:
    n = len(x_shape) - 2
    stride, pad = _ints(op.attr("stride", 1), n), _ints(op.attr("padding", 0), n)
    dil, groups = _ints(op.attr("dilation", 1), n), int(str(op.attr("groups", 1)))
    transposed = bool(op.attr("transposed", False))
    taps = w_shape[2:]
    dims = []
    for i in range(n):
        if transposed:
            dims.append(Dim(x_shape[2 + i], op.shape[2 + i], taps[i], 1, dil[i], stride[i],
                            dil[i] * (taps[i] - 1) - pad[i]))
        else:
            dims.append(Dim(x_shape[2 + i], op.shape[2 + i], taps[i], stride[i], dil[i], 1,
                            pad[i]))
    return ConvSpec(x_shape[0], x_shape[1], op.shape[1], groups, tuple(dims), transposed)


def _tiles(spec: ConvSpec) -> tuple[int, ...]:
    """Output-position tile per spatial dim: innermost first, up to 512 positions."""
    sizes: list[int] = []
    room = NMAX
    for d in reversed(spec.dims):
        t = max(1, min(d.size_out, room))
        sizes.insert(0, t)
        room = room // t if t == d.size_out else 1
    return tuple(sizes)


def _leaf(res: Resolved, arg: object, what: str) -> str:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"convolution {what} is computed; only inputs and parameters are "
                          "lowered")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced or view.shape != view.leaf.shape:
        raise LayoutError(f"convolution {what} is a view of an input")
    return view.leaf.name


def emit_conv(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    """A lone conv, or a chain of convs each reading the previous one's result (e.g. a
    depthwise-separable block): every conv but the last writes an fp32 HBM scratch tensor."""
    convs = [op for op in res.ops if op.op == "conv"]
    if len(convs) != len(res.ops) or len(outputs) != 1 or (
            res.target(outputs[0].name) != convs[-1].name):
        raise LayoutError("a convolution with other ops in the graph (a lone conv, or a "
                          "chain of convs, each with its bias, is lowered)")
    x = _leaf(res, convs[0].args[0], "input")
    x_leaf = res.graph.leaf(x)
    assert x_leaf is not None
    source, shape, dtype = x, x_leaf.shape, x_leaf.dtype
    for i, op in enumerate(convs):
        prev = op.args[0]
        if i and (not isinstance(prev, Ref) or res.target(prev.name) != convs[i - 1].name):
            raise LayoutError("convolutions that do not form a chain")
        out = outputs[0]
        if i < len(convs) - 1:
            out = Output(op.name, kernel.names.fresh("mid"), op.shape, "float32")
            kernel.body.comment(f"{op.origin}'s result, read by the next convolution: an fp32 "
                                "HBM scratch tensor")
            kernel.body.line(f"{out.var} = nl.ndarray({op.shape!r}, dtype=nl.float32, "
                             "buffer=nl.hbm)")
        _emit_one(res, op, kernel, source, shape, dtype, out)
        source, shape, dtype = out.var, op.shape, "float32"


def _emit_one(res: Resolved, op: Op, kernel: Kernel, x: str, x_shape: tuple[int, ...],
              x_dtype: str, out: Output) -> None:
    w = _leaf(res, op.args[1], "weight")
    bias = _leaf(res, op.args[2], "bias") if len(op.args) > 2 else None
    w_leaf = res.graph.leaf(w)
    assert w_leaf is not None
    spec = conv_spec(op, x_shape, w_leaf.shape)
    if depthwise.fits(spec):
        depthwise.emit_depthwise(kernel, spec, op.origin, x, w, bias, out)
        return
    slab = _check(spec, x_dtype)
    compute = nl_dtype(x_dtype) if x_dtype in ("bfloat16", "float16") and (
        w_leaf.dtype == x_dtype) else "nl.float32"
    kind = "transposed convolution" if spec.transposed else "convolution"
    kernel.body.comment(f"{op.origin}: {kind}, groups={spec.groups}, {spec.taps} taps")
    fold = _fold(spec) if slab is None or len(spec.dims) > 1 else 1
    tile_fn = _emit_tile_helper(kernel, spec, bias is not None, out.dtype, slab is not None,
                                fold)
    if slab is not None:
        slab_fn = _emit_slab_helper(kernel, spec, bias is not None, tile_fn, compute, slab,
                                    fold)
        tile_fn = ""
    _emit_body(kernel, spec, x, w, bias, out, tile_fn or slab_fn, compute, slab, fold)


def _fold(spec: ConvSpec) -> int:
    """How many taps of the innermost dim share one matmul (1: none).

    The Tensor Engine costs the same per matmul whatever the contraction rows (up to 128):
    with few input channels (3 in KernelBench 50) most of the array idles. Stacking the
    innermost dim's K taps on the partitions (block kk holds the plane shifted by
    kk * dilation) contracts over cin * K rows in one matmul: K times fewer matmuls, the
    plane loaded K times.
    """
    last = spec.dims[-1]
    # a zero-inserted innermost dim (transposed, stride > 1) is placed by element-wise
    # strided DMA writes: K copies of those cost more than the matmuls they save
    return last.taps if last.taps > 1 and spec.cin_g * last.taps <= PMAX and last.up == 1 else 1


def _shifted(placed: tuple[int, int, int], d: Dim, shift: int) -> tuple[int, int, int]:
    """(first input, count, plane start) of the input that lands in a plane shifted left by
    `shift` positions (the elements that would land before 0 are dropped)."""
    first, count, start = placed
    skip = max(0, -(-(shift - start) // d.up))
    return first + skip, count - skip, start + skip * d.up - shift


def _check(spec: ConvSpec, dtype: str) -> tuple[int, ...] | None:
    """None when the whole plane fits SBUF, else the output tiles of its slab mode."""
    if spec.cin_g > PMAX:
        raise LayoutError(f"convolution with {spec.cin_g} input channels per group (the "
                          f"contraction is tiled up to {PMAX})")
    room = PLANE_BUDGET // 4 - spec.cout_g * spec.taps
    plane = math.prod(d.plane for d in spec.dims)
    if plane <= room:
        return None
    # slab mode: a band of the first spatial dim per output tile (its halo included)
    tiles = list(_tiles(spec))
    d0, rest = spec.dims[0], math.prod(d.plane for d in spec.dims[1:])
    while tiles[0] > 1 and _slab(d0, tiles[0]) * rest > room:
        tiles[0] = max(1, tiles[0] // 2)
    if _slab(d0, tiles[0]) * rest > room:
        raise LayoutError(f"convolution plane of {plane} elements per partition exceeds the "
                          f"SBUF budget ({PLANE_BUDGET // 1024} KiB) even one output row at a "
                          "time")
    return tuple(tiles)


def _slab(d: Dim, rows: int) -> int:
    """Plane rows that `rows` output rows read."""
    return (rows - 1) * d.step + (d.taps - 1) * d.dil + 1



def _emit_bands(body: Block, spec: ConvSpec, rows: int, has_bias: bool, tile_fn: str) -> None:
    """Bands of `rows` output rows, each loading the input rows it reads; closes the batch
    and group loops the caller opened."""
    d0 = spec.dims[0]
    body.comment(f"bands of {rows} output rows; each loads the input rows it reads")
    head = "x_v, w_sb, " + ("b_v, " if has_bias else "") + "out_v, n, g"
    for z0 in range(0, d0.size_out, rows):
        zsz = min(rows, d0.size_out - z0)
        first, count, start = _band(d0, z0, zsz)
        body.line(f"{tile_fn}({head}, {z0}, {zsz}, {first}, {count}, {start})")
    body.dedent()
    body.dedent()


def _emit_tile_grid(body: Block, spec: ConvSpec, cout_g: int, has_bias: bool,
                    tile_fn: str) -> None:
    """The output tiles over the loaded plane x_sb (channels x positions); closes the batch
    and group loops the caller opened."""
    sp = _sp(spec)
    params = "x_sb, w_sb, " + ("b_v, " if has_bias else "") + "out_v, n, g"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
        sp, spec.dims, _tiles(spec), strict=True)]
    emit_grid(body, axes, f"{tile_fn}({params}, {fields})", "affine_range")
    body.dedent()
    body.dedent()

def _band(d: Dim, z0: int, zsz: int) -> tuple[int, int, int]:
    """(first input row, count, slab row it lands on) for output rows z0..z0+zsz."""
    lo, hi = z0 * d.step, z0 * d.step + _slab(d, zsz)
    first = max(0, -((d.lead - lo) // d.up))
    last = min(d.size_in - 1, (hi - 1 - d.lead) // d.up)
    return first, max(0, last - first + 1), first * d.up + d.lead - lo


def _sp(spec: ConvSpec) -> list[str]:
    return [f"s{i}" for i in range(len(spec.dims))]


def _emit_body(kernel: Kernel, spec: ConvSpec, x: str, w: str, bias: str | None, out: Output,
               tile_fn: str, compute: str, slab: tuple[int, ...] | None = None,
               fold: int = 1) -> None:
    body, g_, cin_g, cout_g, taps = kernel.body, spec.groups, spec.cin_g, spec.cout_g, spec.taps
    if fold > 1:
        _emit_folded_body(kernel, spec, x, w, bias, out, tile_fn, compute, fold, slab)
        return
    ins = ", ".join(str(d.size_in) for d in spec.dims)
    outs = ", ".join(str(d.size_out) for d in spec.dims)
    plane = ", ".join(str(d.plane) for d in spec.dims)
    if spec.transposed:
        body.comment(f"weight [Cin, Cout/g, taps] seen as [groups, Cin/g, Cout/g, {taps} taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cin_g}, {cout_g}, {taps}))")
    else:
        body.comment(f"weight [Cout, Cin/g, taps] seen as [groups, Cin/g, Cout/g, {taps} taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cout_g}, {cin_g}, {taps})).permute((0, 2, 1, 3))")
    if bias is not None:
        body.line(f"b_v = {bias}.reshape(({g_}, {cout_g}, 1))")
    body.line(f"x_v = {x}.reshape(({spec.batch}, {g_}, {cin_g}, {ins}))")
    body.line(f"out_v = {out.var}.reshape(({spec.batch}, {g_}, {cout_g}, {outs}))")
    body.line(f"for g in nl.affine_range({g_}):")
    body.indent()
    body.comment("weights stay resident for every batch element and output tile of group g")
    body.line(f"w_sb = nl.ndarray(({cin_g}, {cout_g}, {taps}), dtype={compute}, "
              "buffer=nl.sbuf)")
    body.line("nisa.dma_copy(dst=w_sb, src=w_v[g])")
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    if slab is not None:
        _emit_bands(body, spec, slab[0], bias is not None, tile_fn)
        return
    what = "zero-inserted, padded" if spec.transposed else "zero-padded"
    body.comment(f"the {what} input plane of batch n, group g: loaded once")
    body.line(f"x_sb = nl.ndarray(({cin_g}, {plane}), dtype={compute}, buffer=nl.sbuf)")
    placed = [d.placed() for d in spec.dims]
    covers = all(d.up == 1 and first == 0 and count == d.size_in and start == 0
                 and d.plane == d.size_in for d, (first, count, start) in zip(
                     spec.dims, placed, strict=True))
    if not covers:
        body.line("nisa.memset(dst=x_sb, value=0.0)")
    if all(count > 0 for _, count, _ in placed):
        dst = ", ".join(f"{start}:{start + (count - 1) * d.up + 1}" + (f":{d.up}" if d.up > 1
                        else "") for d, (_, count, start) in zip(spec.dims, placed, strict=True))
        src = ", ".join(f"{first}:{first + count}" for first, count, _ in placed)
        if any(d.up > 1 for d in spec.dims):
            _scatter(body, spec, f"x_v[n, g, 0:{cin_g}, {src}]", f"x_sb[0:{cin_g}, {dst}]",
                     [str(count) for _, count, _ in placed], compute)
        else:
            body.line(f"nisa.dma_copy(dst=x_sb[0:{cin_g}, {dst}], "
                      f"src=x_v[n, g, 0:{cin_g}, {src}])")
    _emit_tile_grid(body, spec, cout_g, bias is not None, tile_fn)


def _scatter(body: Block, spec: ConvSpec, src: str, dst: str, counts: list[str],
             compute: str) -> None:
    """Zero-insertion: the input loaded contiguously, then spread to its strided plane
    positions by the GpSimd engine (an element-wise strided DMA write is one 4-byte
    descriptor per element, the cost model's slowest DMA)."""
    shape = ", ".join(str(c) for c in counts)
    body.comment("zero-insertion: a contiguous load, then an on-chip strided copy (GpSimd)")
    body.line(f"x_in = nl.ndarray(({spec.cin_g}, {shape}), dtype={compute}, buffer=nl.sbuf)")
    body.line(f"nisa.dma_copy(dst=x_in, src={src})")
    body.line(f"nisa.tensor_copy(dst={dst}, src=x_in, engine=nisa.engine.gpsimd)")


def _emit_folded_body(kernel: Kernel, spec: ConvSpec, x: str, w: str, bias: str | None,
                      out: Output, tile_fn: str, compute: str, fold: int,
                      slab: tuple[int, ...] | None = None) -> None:
    """`_emit_body` with the innermost dim's taps stacked on the partitions (see `_fold`)."""
    body, g_, cin_g, cout_g = kernel.body, spec.groups, spec.cin_g, spec.cout_g
    outer = spec.taps // fold
    ins = ", ".join(str(d.size_in) for d in spec.dims)
    outs = ", ".join(str(d.size_out) for d in spec.dims)
    plane = ", ".join(str(d.plane) for d in spec.dims)
    if spec.transposed:
        body.comment(f"weight [Cin, Cout/g, taps] seen as [groups, Cin/g, Cout/g, {outer} outer "
                     f"taps, {fold} inner taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cin_g}, {cout_g}, {outer}, {fold}))")
    else:
        body.comment(f"weight [Cout, Cin/g, taps] seen as [groups, Cin/g, Cout/g, {outer} outer "
                     f"taps, {fold} inner taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cout_g}, {cin_g}, {outer}, {fold}))"
                  ".permute((0, 2, 1, 3, 4))")
    if bias is not None:
        body.line(f"b_v = {bias}.reshape(({g_}, {cout_g}, 1))")
    body.line(f"x_v = {x}.reshape(({spec.batch}, {g_}, {cin_g}, {ins}))")
    body.line(f"out_v = {out.var}.reshape(({spec.batch}, {g_}, {cout_g}, {outs}))")
    rows = fold * cin_g
    body.line(f"for g in nl.affine_range({g_}):")
    body.indent()
    body.comment(f"weights stay resident; partition block kk holds inner tap "
                 f"{'K - 1 - kk (flipped)' if spec.transposed else 'kk'}")
    body.line(f"w_sb = nl.ndarray(({rows}, {cout_g}, {outer}), dtype={compute}, "
              "buffer=nl.sbuf)")
    for kk in range(fold):
        kw = fold - 1 - kk if spec.transposed else kk
        body.line(f"nisa.dma_copy(dst=w_sb[{kk * cin_g}:{(kk + 1) * cin_g}, 0:{cout_g}, "
                  f"0:{outer}], src=w_v[g, 0:{cin_g}, 0:{cout_g}, 0:{outer}, {kw}])")
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    if slab is not None:
        _emit_bands(body, spec, slab[0], bias is not None, tile_fn)
        return
    what = "zero-inserted, padded" if spec.transposed else "zero-padded"
    last = spec.dims[-1]
    body.comment(f"the {what} input plane of batch n, group g, {fold} times: block kk "
                 f"shifted left by kk * {last.dil} along the innermost dim")
    body.line(f"x_sb = nl.ndarray(({rows}, {plane}), dtype={compute}, buffer=nl.sbuf)")
    body.line("nisa.memset(dst=x_sb, value=0.0)")
    placed = [d.placed() for d in spec.dims]
    for kk in range(fold):
        here = [*placed[:-1], _shifted(placed[-1], last, kk * last.dil)]
        if not all(c > 0 for _, c, _ in here):
            continue
        dst = ", ".join(f"{st}:{st + (c - 1) * d.up + 1}" + (f":{d.up}" if d.up > 1 else "")
                        for d, (_, c, st) in zip(spec.dims, here, strict=True))
        src = ", ".join(f"{f}:{f + c}" for f, c, _ in here)
        body.line(f"nisa.dma_copy(dst=x_sb[{kk * cin_g}:{(kk + 1) * cin_g}, {dst}], "
                  f"src=x_v[n, g, 0:{cin_g}, {src}])")
    _emit_tile_grid(body, spec, cout_g, bias is not None, tile_fn)


def _emit_tile_helper(kernel: Kernel, spec: ConvSpec, bias: bool, out_dtype: str,
                      banded: bool = False, fold: int = 1) -> str:
    fn = kernel.names.fresh("conv_tile")
    blk = Block(depth=1)
    sp = _sp(spec)
    sizes = ", ".join(f"{v}sz" for v in sp)
    blk.line(f"acc = nl.ndarray((csz, {sizes}), dtype=nl.float32, buffer=nl.psum)")
    looped = spec.dims[:-1] if fold > 1 else spec.dims  # folded taps are on the partitions
    taps = [f"k{i}" for i in range(len(looped))]
    for k, d in zip(taps, looped, strict=True):
        blk.line(f"for {k} in nl.affine_range({d.taps}):")
        blk.indent()
    count = math.prod(d.taps for d in looped)
    flat = " + ".join(f"{k} * {math.prod(d.taps for d in looped[i + 1:])}"
                      if i < len(taps) - 1 else k for i, k in enumerate(taps)) or "0"
    tap = f"{count - 1} - ({flat})" if spec.transposed and taps else flat
    rows = spec.cin_g * fold
    windows = []
    for i, (v, d) in enumerate(zip(sp, spec.dims, strict=True)):
        origin = f"({v}0 - z0)" if banded and i == 0 else f"{v}0"
        k = taps[i] if i < len(taps) else "0"
        start = f"{origin} * {d.step} + {k} * {d.dil}" if d.step > 1 else (
            f"{origin} + {k} * {d.dil}")
        step = f":{d.step}" if d.step > 1 else ""
        stop = f"({v}sz - 1) * {d.step} + 1" if d.step > 1 else f"{v}sz"
        windows.append(f"{start}:{start} + {stop}{step}")
    blk.comment("tap: a shifted" + (", strided" if any(d.step > 1 for d in spec.dims) else "")
                + " window of the plane; PSUM accumulates over the taps" + (
                    f" (the innermost dim's {fold} taps contract on the partitions)"
                    if fold > 1 else ""))
    blk.line(f"nisa.nc_matmul(acc, w_sb[0:{rows}, nl.ds(c0, csz), {tap}], "
             f"x_sb[0:{rows}, {', '.join(windows)}])")
    for _ in taps:
        blk.dedent()
    blk.line(f"res = nl.ndarray((csz, {sizes}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if bias:
        blk.line("b_t = nl.load(b_v[g, nl.ds(c0, csz), 0:1], dtype=nl.float32)")
        blk.comment("bias: one value per output channel (partition)")
        blk.line("nisa.tensor_scalar(dst=res, data=acc, op0=nl.add, operand0=b_t)")
    else:
        blk.line("nisa.tensor_copy(dst=res, src=acc)")
    index = ", ".join(f"nl.ds({v}0, {v}sz)" for v in sp)
    blk.line(f"nl.store(out_v[n, g, nl.ds(c0, csz), {index}], res)")
    args = ", ".join(f"{v}0, {v}sz" for v in sp)
    head = "x_sb, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g" + (", z0" if banded else "")
    kernel.helpers.append([
        f"def {fn}({head}, c0, csz, {args}):",
        '    """Output channels c0..c0+csz (of group g) at one tile of output positions."""',
        *blk.lines,
    ])
    return fn


def _emit_slab_helper(kernel: Kernel, spec: ConvSpec, bias: bool, tile_fn: str, compute: str,
                      tiles: tuple[int, ...], fold: int = 1) -> str:
    """A band of output rows z0..z0+zsz: load the input rows it reads, then its tiles."""
    fn = kernel.names.fresh("conv_band")
    blk = Block(depth=1)
    d0, rest = spec.dims[0], spec.dims[1:]
    cin = spec.cin_g
    plane = ", ".join([str(_slab(d0, tiles[0])), *(str(d.plane) for d in rest)])
    blk.line(f"x_sb = nl.ndarray(({cin * fold}, {plane}), dtype={compute}, buffer=nl.sbuf)")
    blk.line("nisa.memset(dst=x_sb, value=0.0)")
    placed = [d.placed() for d in rest]
    step = f":{d0.up}" if d0.up > 1 else ""
    blk.line("if icount > 0:  # a band wholly in the padding reads no input")
    if fold > 1:
        blk.comment(f"    partition block kk: the band shifted left by kk * {rest[-1].dil} "
                    "along the innermost dim")
    for kk in range(fold):
        here = [*placed[:-1], _shifted(placed[-1], rest[-1], kk * rest[-1].dil)]
        if not all(c > 0 for _, c, _ in here):
            continue
        dst = ", ".join([f"j0:j0 + (icount - 1) * {d0.up} + 1{step}"] + [
            f"{start}:{start + (count - 1) * d.up + 1}" + (f":{d.up}" if d.up > 1 else "")
            for d, (_, count, start) in zip(rest, here, strict=True)])
        src = ", ".join(["nl.ds(i0, icount)"] + [f"{first}:{first + count}"
                                                  for first, count, _ in here])
        if any(d.up > 1 for d in spec.dims):
            blk.indent()
            _scatter(blk, spec, f"x_v[n, g, 0:{cin}, {src}]",
                     f"x_sb[{kk * cin}:{(kk + 1) * cin}, {dst}]",
                     ["icount", *(str(count) for _, count, _ in here)], compute)
            blk.dedent()
        else:
            blk.line(f"    nisa.dma_copy(dst=x_sb[{kk * cin}:{(kk + 1) * cin}, {dst}], "
                     f"src=x_v[n, g, 0:{cin}, {src}])")
    sp = _sp(spec)
    params = "x_sb, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g, z0"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
        sp[1:], rest, tiles[1:], strict=True)]
    emit_grid(blk, axes, f"{tile_fn}({params}, {fields})", "affine_range",
              {sp[0]: ("z0", "zsz")})  # type: ignore[dict-item]
    head = "x_v, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g"
    kernel.helpers.append([f"def {fn}({head}, z0, zsz, i0, icount, j0):",
                           '    """Output rows z0..z0+zsz: input rows i0..i0+icount land at '
                           'band row j0."""', *blk.lines])
    return fn
