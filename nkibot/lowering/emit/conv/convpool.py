"""Reductions fused into a convolution's tiles, so its output never reaches HBM.

A global pool: a sum, max or min over every position dim of the conv's value (after its
eviction and tail), as KernelBench level 2's `mean(dim=(2, 3))` and `adaptive_avg_pool2d(.,
1)` after a conv. Each output tile folds its `[channels, positions]` tile into one column of
a `[channels, tiles]` SBUF tile of partials (a column per tile, so the tiles stay
independent: no loop-carried value); after the batch element's tiles, the partials fold
once more, the pointwise ops on the pooled value run (a convtail helper on a `[channels, 1]`
tile) and one value per channel is stored.

A fold over the channels (dim 1, as level 2's `min(x, dim=1)`): the channels are the
tile's partitions, so each tile folds them 128 positions at a time (transpose on the Tensor
Engine, fold along the free axis, transpose the column back into one PSUM row); the ops
after the fold run on that `[1, positions]` row, which is stored.

Without them the conv's whole output went to HBM scratch and a row-wise stage read it back.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from nkibot.lowering.emit.builder import PMAX, Block, nl_dtype
from nkibot.lowering.emit.conv import convslab, convtail
from nkibot.lowering.emit.conv.epilogue import POOL_FOLD, Epilogue, pool_kernel
from nkibot.lowering.emit.fused import PASS_NS
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op
from nkibot.lowering.schedule.convspec import NMAX, ConvSpec, plane_room, slab_rows
from nkibot.lowering.schedule.layout import LayoutError, Resolved


def vector_load(form: object) -> float:
    """Modelled ns per element of the conv tile a fused pool or reduction gives the Vector
    Engine after the tail (the tail balances against it): a global pool's fold and a
    channel fold read the tile once; a window pool's first fold reads it once and its
    others (one fewer than the other dims' window offsets, two inputs each) a k-th of it
    each."""
    one = PASS_NS["vector"]
    if isinstance(form, WindowForm):
        k = math.prod(form.kernel)
        return one * (1 + 2 * (math.prod(form.kernel[:-1]) - 1) / k)
    return one if isinstance(form, PoolForm | AcrossForm) else 0.0


@dataclass(frozen=True)
class PoolForm:
    """A global pool fused into the conv: its fold, the helper for the ops on its result
    (None: none), and what to say of it."""

    fold: str  # the tensor_reduce op (POOL_FOLD)
    after: convtail.TailCall | None
    dtype: str  # the output's
    origin: str
    what: str  # "sum", "max", "min"


#: Columns a global pool's partials may take per partition (fp32): beyond it, staged.
POOL_COLUMNS = 4096


def tile_count(spec: ConvSpec) -> int:
    """Tiles of output positions (and of 128 channels) in one batch element's grid."""
    return convslab.band_tiles(spec, (), ())


def _after_helper(res: Resolved, kernel: Kernel, conv: Op, value: Op, epi: Epilogue,
                  out: Output) -> convtail.TailCall | None:
    """The helper for the pointwise ops after `value` (a pool's or fold's result), on its
    own frame; None when none follow."""
    if not epi.after:
        return None
    last = Output(epi.after[-1].name, out.var, value.shape, out.dtype)
    return convtail.emit_tail(res, kernel, conv, [value.name], epi.after, last,
                              tuple(value.shape))


def _finish(blk: Block, value: str, after: convtail.TailCall | None, args: list[str],
            dtype: str) -> str:
    """Lines running the helper after the fold on `value` (`args`: its batch element,
    channel and position arguments), or casting it to the output's dtype; the result."""
    if after is not None:
        blk.line(f"fin = {after.fn}({', '.join([value, *after.views, *args])})")
        return "fin"
    if dtype != "float32":
        blk.line(f"fin = nl.copy({value}, dtype={nl_dtype(dtype)})")
        return "fin"
    return value


def pool_form(res: Resolved, kernel: Kernel, conv: Op, epi: Epilogue, out: Output) -> PoolForm:
    """The global pool's form: its fold and the helper for the pointwise ops after it."""
    red = epi.reduce
    assert red is not None
    if epi.after and len(red.shape) < 3:
        raise LayoutError("ops after a global pool that drops its dims (keepdim=False), fused "
                          "(staged instead)")
    what = {"rsum": "sum", "rmax": "max", "rmin": "min"}[red.op]
    return PoolForm(POOL_FOLD[red.op], _after_helper(res, kernel, conv, red, epi, out),
                    out.dtype, red.origin or red.op, what)


def emit_partials(body: Block, spec: ConvSpec, pool: PoolForm, count: int) -> None:
    """The [channels, tiles] SBUF tile of a batch element's partials."""
    if count > POOL_COLUMNS:
        raise LayoutError(f"a global pool over {count} output tiles, more than its partials "
                          f"may take ({POOL_COLUMNS}; staged instead)")
    body.comment(f"{pool.origin}: each output tile's partial {pool.what} per channel, a "
                 "column of part")
    body.line(f"part = nl.ndarray(({spec.cout_g}, {count}), dtype=nl.float32, buffer=nl.sbuf)")


def emit_fold(body: Block, spec: ConvSpec, pool: PoolForm, count: int) -> None:
    """Fold the partials' columns, the ops after the pool, and store one value per channel
    (inside the batch loop; one block of at most 128 channels)."""
    csz = spec.cout_g
    body.comment(f"{pool.origin}: fold the partials, one {pool.what} per channel")
    body.line(f"tot = nl.ndarray(({csz}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.tensor_reduce(dst=tot, op={pool.fold}, data=part[0:{csz}, 0:{count}], "
              "axis=1)")
    channel = f"g * {spec.cout_g}" if spec.groups > 1 else "0"
    value = _finish(body, "tot", pool.after, ["n", channel, str(csz), "0", "1"], pool.dtype)
    body.line(f"nl.store(out_v[n, g, 0:{csz}, 0:1], {value})")


@dataclass(frozen=True)
class AcrossForm:
    """A fold over the channels (dim 1) fused into the conv's tiles: its op, the helper for
    the pointwise ops on its [N, 1, positions...] result (None: none), the output's dtype."""

    fold: str
    after: convtail.TailCall | None
    dtype: str
    origin: str


def channel_form(res: Resolved, kernel: Kernel, conv: Op, epi: Epilogue,
                 out: Output) -> AcrossForm:
    """The channel fold's form (one block of at most 128 channels, one group)."""
    red = epi.reduce
    assert red is not None
    if epi.after and len(red.shape) != len(conv.shape):
        raise LayoutError("ops after a channel reduction that drops its dim (keepdim=False), "
                          "fused (staged instead)")
    return AcrossForm(POOL_FOLD[red.op], _after_helper(res, kernel, conv, red, epi, out),
                      out.dtype, red.origin or red.op)


def emit_channel_fold(blk: Block, across: AcrossForm, sizes: list[str], flat: str | None
                      ) -> None:
    """Lines of a tile helper (with `res` [csz, *sizes], fp32, every channel) that replace
    `res` by its fold over the channels, [1, *sizes]: 128 positions at a time, transposed on
    the Tensor Engine (positions onto the partitions), folded along the free axis by the
    Vector Engine and transposed back into one PSUM row; then the ops after the fold."""
    q = " * ".join(sizes)
    blk.comment(f"{across.origin}: fold the channels (the partitions), 128 positions at a "
                "time: transpose, fold along the free axis, transpose back into one row")
    blk.line(f"flat_t = res.reshape((csz, {q}))")
    blk.line(f"row_ps = nl.ndarray((1, {q}), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"for cb in range(({q} + {PMAX - 1}) // {PMAX}):")
    blk.line(f"    w = min({PMAX}, {q} - cb * {PMAX})")
    blk.line("    tp = nl.ndarray((w, csz), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"    nisa.nc_transpose(tp, flat_t[0:csz, nl.ds(cb * {PMAX}, w)])")
    blk.line("    col = nl.ndarray((w, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"    nisa.tensor_reduce(dst=col, op={across.fold}, data=tp, axis=1)")
    blk.line(f"    nisa.nc_transpose(row_ps[0:1, nl.ds(cb * {PMAX}, w)], col)")
    blk.line(f"row = nl.ndarray((1, {q}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_copy(dst=row, src=row_ps)")
    if across.after is not None and across.after.indexed and flat is None:
        raise LayoutError("a tensor of the positions' shape after a channel reduction, on "
                          "tiles that are not whole rows (staged instead)")
    start = flat if across.after is not None and across.after.indexed and flat is not None else "0"
    value = _finish(blk, "row", across.after, ["n", "0", "1", start, q], across.dtype)
    blk.line(f"res = {value}.reshape((1, {', '.join(sizes)}))")


@dataclass(frozen=True)
class WindowForm:
    """A max or average pool whose windows tile the conv's positions, fused into its tiles:
    the grid runs over pooled positions (`tiles` of them a tile, per dim), each conv tile
    covers whole windows; `after` runs on the pooled tile."""

    kind: str  # "max" | "avg"
    kernel: tuple[int, ...]
    pooled: tuple[int, ...]  # pooled extent per dim
    tiles: tuple[int, ...]  # pooled positions per tile, per dim
    after: convtail.TailCall | None
    dtype: str
    origin: str


Fused = PoolForm | AcrossForm | WindowForm


def window_form(res: Resolved, kernel: Kernel, conv: Op, epi: Epilogue,
                out: Output) -> WindowForm:
    """The fused pool's form: its pooled grid and the helper for the ops after it."""
    pool = epi.window
    assert pool is not None
    sizes = pool_kernel(pool)
    pooled = tuple(pool.shape[2:])
    return WindowForm(str(pool.attr("kind")), sizes, pooled, window_tiles(pooled, sizes),
                      _after_helper(res, kernel, conv, pool, epi, out), out.dtype,
                      pool.origin or pool.op)


def window_tiles(pooled: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[int, ...]:
    """Pooled positions per tile, innermost dim first, so that the conv positions a tile
    covers (the pooled ones times the kernel) stay within one PSUM bank (NMAX)."""
    tiles: list[int] = []
    room = NMAX
    for i in reversed(range(len(pooled))):
        outer = math.prod(kernel[:i])
        tp = max(1, min(pooled[i], room // (kernel[i] * outer)))
        tiles.insert(0, tp)
        room = room // (tp * kernel[i]) if tp == pooled[i] else outer
    if math.prod(t * k for t, k in zip(tiles, kernel, strict=True)) > NMAX:
        raise LayoutError(f"pool windows of {math.prod(kernel)} positions do not fit a conv "
                          "tile (staged instead)")
    return tuple(tiles)


def out_dims(fused: Fused | None, spec: ConvSpec) -> str:
    """The output view's dims after (batch, group): channels, then positions."""
    if isinstance(fused, PoolForm):
        return f"{spec.cout_g}, 1"
    if isinstance(fused, AcrossForm):
        return "1, " + ", ".join(str(d.size_out) for d in spec.dims)
    if isinstance(fused, WindowForm):
        return f"{spec.cout_g}, " + ", ".join(map(str, fused.pooled))
    return f"{spec.cout_g}, " + ", ".join(str(d.size_out) for d in spec.dims)


def emit_window(blk: Block, win: WindowForm, sp: list[str], flat: str | None,
                channel: str) -> None:
    """Lines of a tile helper (with `res` [csz, conv tile], fp32) that pool it into `res`
    [csz, pooled tile] (p{i}sz per dim), then run the ops after the pool: one Vector fold of
    the last dim's windows over the whole tile (its positions split [pooled, kernel]), then
    one instruction per window offset of the other dims, over strided views."""
    nd = len(win.kernel)
    psizes = [f"p{i}sz" for i in range(nd)]
    op = "nl.maximum" if win.kind == "max" else "nl.add"
    blk.comment(f"{win.origin}: {win.kind} pool of {' x '.join(map(str, win.kernel))} windows "
                "over the tile: the last dim's windows in one fold, then the other dims'")
    src = "res"
    if win.kernel[-1] > 1:
        lead = [f"{v}sz" for v in sp[:-1]]
        blk.line(f"rw = nl.ndarray((csz, {', '.join([*lead, psizes[-1]])}), dtype=nl.float32, "
                 "buffer=nl.sbuf)")
        blk.line(f"nisa.tensor_reduce(dst=rw, op={op}, data=res.reshape((csz, "
                 f"{', '.join([*lead, psizes[-1], str(win.kernel[-1])])})), axis={nd + 1})")
        src = "rw"
    outer = list(itertools.product(*(range(k) for k in win.kernel[:-1])))
    if len(outer) > 1:
        blk.line(f"pv = nl.ndarray((csz, {', '.join(psizes)}), dtype=nl.float32, "
                 "buffer=nl.sbuf)")
        views = [f"{src}[0:csz, " + ", ".join([*(f"{o}:{v}sz:{k}" for o, v, k in zip(
            off, sp, win.kernel, strict=False)), f"0:{psizes[-1]}"]) + "]" for off in outer]
        for j, view in enumerate(views[1:]):  # the first two offsets in one instruction
            blk.line(f"nisa.tensor_tensor(dst=pv, data1={views[0] if j == 0 else 'pv'}, "
                     f"data2={view}, op={op})")
        src = "pv"
    if win.kind == "avg":
        blk.line(f"nisa.tensor_scalar(dst={src}, data={src}, op0=nl.multiply, "
                 f"operand0={1.0 / math.prod(win.kernel)!r})")
    blk.line(f"res = {src}")
    if win.after is not None:
        for line in win.after.call(psizes, channel, flat):
            blk.line(line)
    elif win.dtype != "float32":
        blk.line(f"res = nl.copy(res, dtype={nl_dtype(win.dtype)})")


def window_bands(spec: ConvSpec, slab: tuple[tuple[int, int], ...], win: WindowForm
                 ) -> tuple[ConvSpec, tuple[tuple[int, int], ...]]:
    """For a plane loaded in bands of dim 0: the spec whose dim 0 ends at the last whole
    window, and bands of whole windows (rows a multiple of the kernel's, within the band's
    SBUF room: at least one window)."""
    if len(slab) > 1:
        raise LayoutError("a pool on a conv whose plane is loaded in bands of two dims "
                          "(staged instead)")
    k0 = win.kernel[0]
    d0 = spec.dims[0]
    cut = replace(spec, dims=(replace(d0, size_out=win.pooled[0] * k0), *spec.dims[1:]))
    rows = max(k0, slab[0][0] // k0 * k0)
    if rows > slab[0][0] and slab_rows(d0, rows) * math.prod(
            d.plane for d in spec.dims[1:]) > plane_room(spec):
        raise LayoutError("a pool window's rows do not fit a band of the plane (staged "
                          "instead)")
    return cut, ((rows, rows),)
