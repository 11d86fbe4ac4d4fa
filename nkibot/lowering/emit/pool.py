"""Max and average pooling (1-D, 2-D, 3-D) on the Vector Engine, one spatial dim at a time.

Rows (batch x channels) sit on the partitions, G whole rows per partition per tile (one
contiguous DMA of G planes each way, and every instruction covers G rows: the ~64-cycle
instruction cost and the ~2 us DMA cost are paid once per G rows). Each row's plane is
padded with the pool's identity (-3e38 for max, 0 for average, as PyTorch pads; only the
border is set). A window over several dims is separable: the pool folds the innermost dim
first, then the next (K*K taps become 2K, K^3 become 3K). Along one dim with stride 1 the
window doubles (`w2[i] = op(x[i], x[i + d])`, `w4[i] = op(w2[i], w2[i + 2d])`, ...): log2(K)
passes for a max (two overlapping halves), log2(K) + popcount(K) - 1 for a sum; other
strides fold the K taps' strided windows one per pass, the first two in one instruction.
Average pooling scales by 1 / divisor on the Scalar Engine while converting to the
output dtype. `ceil_mode` only changes the output extent, which the plane covers with more
padding. A plane over the tile budget runs in bands of dim 0's output rows, each band
loading the input rows its windows read (padded: its slab's padding set to the identity).
"""

from __future__ import annotations

import math
from dataclasses import replace

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.convspec import Dim
from nkibot.lowering.schedule.layout import LayoutError, Resolved
from nkibot.sim.cost.quick import SBUF_BYTES

TILE_BUDGET = SBUF_BYTES // 4  # bytes per partition for one row tile's planes and passes
ROW_LIMIT = SBUF_BYTES * 5 // 6  # one row's plane and passes beyond this: declined
MIN_TILES = 4  # keep at least this many row tiles (when there are rows) for overlap
SHORT_RUN = 512  # bytes: a padded load with shorter contiguous runs lands in a stage first
FILL = {"max": "-3.0e38", "avg": "0.0"}
FOLD = {"max": "nl.maximum", "avg": "nl.add"}

#: One pass: dst = op(a[a_off::a_step], b[b_off::b_step]) over `count` positions of a dim.
Pass = tuple[str, str, int, int, str, int, int, int]


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


def fold_passes(i: int, d: Dim, kind: str, src: str) -> tuple[list[Pass], dict[str, int]]:
    """The passes that fold dim i of `src` to its output extent, and each new tile's extent
    along it (the last pass writes `f{i}`)."""
    k, dil, out = d.taps, d.dil, d.size_out
    out_name = f"f{i}"
    if k == 1:  # a strided copy
        return [(out_name, src, 0, d.step, src, 0, d.step, out)], {out_name: out}
    passes: list[Pass] = [(out_name, src, 0, d.step, src, dil, d.step, out)]
    if d.step > 1 or k < 4:  # the taps one by one, the first two in one pass
        passes += [(out_name, out_name, 0, 1, src, t * dil, d.step, out) for t in range(2, k)]
        return passes, {out_name: out}
    passes = []
    ext: dict[str, int] = {}
    width, name, powers = 1, src, {1: src}
    while 2 * width <= k:
        new = out_name if 2 * width == k else f"w{i}_{2 * width}"
        size = out + (k - 2 * width) * dil
        passes.append((new, name, 0, 1, name, width * dil, 1, size))
        ext[new] = size
        width, name = 2 * width, new
        powers[width] = new
    if width < k and kind == "max":  # two overlapping halves
        passes.append((out_name, name, 0, 1, name, (k - width) * dil, 1, out))
    elif width < k:  # a sum: the binary digits of k - width after the widest window
        acc, off = name, width
        for p in sorted(powers, reverse=True):
            if off + p <= k:
                passes.append((out_name, acc, 0, 1, powers[p], off * dil, 1, out))
                acc, off = out_name, off + p
    ext[out_name] = out
    return passes, ext


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
    rows = shape[0] * shape[1]
    per_row = _row_bytes(dims, kind)
    cols = 1  # bands of dim 1 too: one output row of dim 0 is over ROW_LIMIT
    if per_row > TILE_BUDGET:  # the plane does not fit whole: dim 0 in bands that do
        g, (bands, cols) = 1, _fitting_bands(dims, kind)
    else:
        g = _rows_per_partition(rows, per_row)
        bands = _bands(-(-rows // g // PMAX), dims, g)
    tile_dims = dims if bands == cols == 1 else _banded(dims, bands, cols)
    body = kernel.body
    if bands > 1 and _padded(dims):
        _emit_padded_bands(kernel, (x, outputs[0]), dims, bands, op, per_row)
        return
    tile_fn = _emit_tile(kernel, tile_dims, kind, op, outputs[0].dtype, g,
                         dims[0].step if bands > 1 or cols > 1 else 0,
                         col_step=dims[1].step if cols > 1 else 0)
    body.comment(f"{op.origin}: batch x channels on partitions ({g} rows each), each row's "
                 "plane in the free dims")
    body.line(f"x_v = {x}.reshape(({rows // g}, {g}, "
              f"{', '.join(str(d.size_in) for d in dims)}))")
    body.line(f"out_v = {outputs[0].var}.reshape(({rows // g}, {g}, "
              f"{', '.join(str(d.size_out) for d in dims)}))")
    if bands == 1:
        emit_grid(body, [Axis("r", rows // g, PMAX)],
                  f"{tile_fn}(x_v, out_v, {{r0}}, {{rsz}})", "affine_range")
        return
    why = (f"a row's whole plane ({per_row} bytes) is over the {TILE_BUDGET}-byte tile budget"
           if per_row > TILE_BUDGET else "a band's passes overlap the next band's load")
    if cols > 1:
        body.comment(f"{bands} bands of {tile_dims[0].size_out} output rows of dim 0 x {cols} "
                     f"bands of {tile_dims[1].size_out} of dim 1: {why}, and one output row of "
                     f"dim 0 over the {ROW_LIMIT}-byte row limit")
        emit_grid(body, [Axis("r", rows // g, PMAX),
                         Axis("b", dims[0].size_out, tile_dims[0].size_out),
                         Axis("y", dims[1].size_out, tile_dims[1].size_out)],
                  f"{tile_fn}(x_v, out_v, {{r0}}, {{rsz}}, {{b0}}, {{y0}})", "affine_range")
        return
    body.comment(f"{bands} bands of {tile_dims[0].size_out} output rows of dim 0: {why}")
    emit_grid(body, [Axis("r", rows // g, PMAX), Axis("b", dims[0].size_out,
                                                      tile_dims[0].size_out)],
              f"{tile_fn}(x_v, out_v, {{r0}}, {{rsz}}, {{b0}})", "affine_range")


def _banded(dims: tuple[Dim, ...], bands: int, cols: int = 1) -> tuple[Dim, ...]:
    """The dims one band of dim 0's output rows sees (`bands` divides dim 0's output); a
    band's dim 0 is its slab of the padded plane, so it has no padding of its own. With
    `cols` > 1 (dividing dim 1's output), a band of dim 1's output rows likewise."""
    rows = dims[0].size_out // bands
    out = [replace(dims[0], size_in=_band_in(dims[0], rows), size_out=rows, lead=0),
           *dims[1:]]
    if cols > 1:
        rows = dims[1].size_out // cols
        out[1] = replace(dims[1], size_in=_band_in(dims[1], rows), size_out=rows, lead=0)
    return tuple(out)


def _band_rows(d: Dim, z0: int, rows: int) -> tuple[int, int, int]:
    """(first input row, count, slab row it lands on) of output rows z0..z0+rows of a
    padded dim: the slab's rows that are padding are not loaded."""
    lo = z0 * d.step - d.lead
    first, last = max(0, lo), min(d.size_in, lo + _band_in(d, rows))
    return first, max(0, last - first), first - lo


def _emit_padded_bands(kernel: Kernel, io: tuple[str, Output], dims: tuple[Dim, ...],
                       bands: int, op: Op, per_row: int) -> None:
    """A padded plane over the tile budget: one row a partition, dim 0's output rows in
    bands, each band's slab the identity where it is padding and the input rows it reads
    elsewhere. Bands that meet the padding get helpers of their own (a different load);
    every call is static, so each knows its rows."""
    x, out = io
    kind = str(op.attr("kind"))
    rows = dims[0].size_out // bands
    tile_dims = _banded(dims, bands)
    helpers: dict[tuple[int, int], str] = {}
    calls = []
    for b in range(bands):
        first, count, at = _band_rows(dims[0], b * rows, rows)
        if (count, at) not in helpers:
            helpers[(count, at)] = _emit_tile(kernel, tile_dims, kind, op, out.dtype, 1,
                                              dims[0].step, (count, at))
        calls.append(f"{helpers[(count, at)]}(x_v, out_v, {{r0}}, {{rsz}}, {b * rows}, "
                     f"{first})")
    body = kernel.body
    body.comment(f"{op.origin}: batch x channels on partitions (1 row each), each row's "
                 "plane in the free dims")
    total = out.shape[0] * out.shape[1]
    body.line(f"x_v = {x}.reshape(({total}, 1, {', '.join(str(d.size_in) for d in dims)}))")
    body.line(f"out_v = {out.var}.reshape(({total}, 1, "
              f"{', '.join(str(d.size_out) for d in dims)}))")
    body.comment(f"{bands} bands of {rows} output rows of dim 0: a row's whole plane "
                 f"({per_row} bytes) is over the {TILE_BUDGET}-byte tile budget; a band that "
                 "meets the padding loads fewer rows")
    full, rem = divmod(total, PMAX)
    if full:
        body.line(f"for r in nl.affine_range({full}):")
        body.indent()
        for call in calls:
            body.line(call.format(r0=f"r * {PMAX}", rsz=PMAX))
        body.dedent()
    for call in calls if rem else []:
        body.line(call.format(r0=full * PMAX, rsz=rem))


def _fitting_bands(dims: tuple[Dim, ...], kind: str) -> tuple[int, int]:
    """Bands of dim 0's output rows for a plane over TILE_BUDGET: the fewest (a divisor of
    dim 0's output, so every band has the same rows) whose plane and passes fit TILE_BUDGET,
    else one output row a band within ROW_LIMIT (KernelBench level 2 3 failed to compile
    with two rows a band: 128 KiB beside its LayerNorm stage's live weights); with the
    bands of dim 1 (1: none). When even one output row is over ROW_LIMIT, an unpadded plane
    bands dim 1 too (`_column_bands`); else a LayoutError."""
    per_row = _row_bytes(dims, kind)
    out = dims[0].size_out
    counts = [b for b in range(2, out + 1) if out % b == 0]
    fits = [b for b in counts if _row_bytes(_banded(dims, b), kind) <= TILE_BUDGET]
    if fits:
        return fits[0], 1
    if counts and _row_bytes(_banded(dims, out), kind) <= ROW_LIMIT:
        # no band fits the tile budget: one output row a band, the least SBUF left to
        # share with what earlier stages keep live (a LayerNorm's broadcast weights)
        return out, 1
    cols = _column_bands(dims, kind)
    if cols > 1:
        return out, cols
    one = _row_bytes(_banded(dims, out), kind) if out > 1 else per_row
    raise LayoutError(f"pooling needs {one} bytes per row in SBUF (over {ROW_LIMIT}) even "
                      "one output row of dim 0 at a time")


def _column_bands(dims: tuple[Dim, ...], kind: str) -> int:
    """Bands of dim 1's output rows under bands of one output row of dim 0 (a 3-D pool of
    large H x W planes): the fewest dividing dim 1's output that fit TILE_BUDGET, else one
    row a band within ROW_LIMIT; 1 when none does or the plane is padded (its bands load
    by `_emit_padded_bands`, dim 0 only)."""
    if _padded(dims) or len(dims) < 2:
        return 1
    out = dims[1].size_out
    counts = [b for b in range(2, out + 1) if out % b == 0]
    fits = [b for b in counts
            if _row_bytes(_banded(dims, dims[0].size_out, b), kind) <= TILE_BUDGET]
    if fits:
        return fits[0]
    if counts and _row_bytes(_banded(dims, dims[0].size_out, out), kind) <= ROW_LIMIT:
        return out
    return 1


def _band_in(d: Dim, out_rows: int) -> int:
    """Input rows of dim `d` that `out_rows` output rows read (their windows)."""
    return (out_rows - 1) * d.step + (d.taps - 1) * d.dil + 1


def _bands(tiles: int, dims: tuple[Dim, ...], g: int) -> int:
    """Bands of dim 0's output rows per row tile, when there are too few row tiles to
    overlap a tile's load with another's passes (a lone tile's load, passes and store run
    one after another): the most of 8, 4, 2 that divide dim 0 evenly and keep each band's
    load at least 4 KiB a partition. Unpadded pools only (a band's plane is a plain slab)."""
    if tiles >= MIN_TILES or _padded(dims) or len(dims) < 2:
        return 1
    inner = math.prod(d.size_in for d in dims[1:]) * g * 4
    for bands in (8, 4, 2):
        rows = dims[0].size_out // bands
        if dims[0].size_out % bands == 0 and _band_in(dims[0], rows) * inner >= 4096:
            return bands
    return 1


def _padded(dims: tuple[Dim, ...]) -> bool:
    return any(d.lead or d.plane > d.size_in for d in dims)


#: free dims of an SBUF access pattern (nki/deep-dives/nki-aps.rst: "up to
#: four-dimensional arrays" in the free dimension)
AP_FREE_DIMS = 4


def _tiled(dims: tuple[Dim, ...], g: int) -> bool:
    """Windows that tile the unpadded plane (stride = kernel, no dilation): each output
    element reduces its own block of the input, with no overlap; and the reduction's
    access pattern has at most AP_FREE_DIMS free dims."""
    return not _padded(dims) and all(
        d.step == d.taps and d.dil == 1 and d.up == 1 and d.taps > 1 for d in dims
    ) and len(_window_pattern(dims, g)[0]) <= AP_FREE_DIMS


def _window_pattern(dims: tuple[Dim, ...], g: int) -> tuple[list[tuple[int, int]], int]:
    """The free [step, count] pairs that read x_sb as [rows, outputs..., taps...] (one-element
    dims dropped; the rows merged into dim 0's outputs when dim 0 has no leftover input)
    and how many trailing pairs are taps."""
    n = len(dims)
    inner = [math.prod(d.size_in for d in dims[i + 1:]) for i in range(n)]
    outs = [(d.taps * inner[i], d.size_out) for i, d in enumerate(dims)]
    rows = math.prod(d.size_in for d in dims)
    if dims[0].size_out * dims[0].taps == dims[0].size_in:
        outs[0] = (outs[0][0], g * outs[0][1])
    elif g > 1:
        outs.insert(0, (rows, g))
    taps = [(inner[i], d.taps) for i, d in enumerate(dims)]
    return [pr for pr in outs if pr[1] > 1] + taps, len(taps)


def _emit_window_reduce(blk: Block, dims: tuple[Dim, ...], kind: str, g: int,
                        dtype: str) -> None:
    """f0 <- every window's max or sum in one Vector Engine tensor_reduce, reading x_sb
    through an access pattern [rows, outputs per dim..., taps per dim...] (one pass over
    the input, where folding dim by dim reads it about 1.5 times)."""
    pairs, n = _window_pattern(dims, g)
    free = g * math.prod(d.size_in for d in dims)
    text = ", ".join([f"[{free}, p]", *(f"[{a}, {b}]" for a, b in pairs)])
    axes = tuple(range(1 + len(pairs) - n, 1 + len(pairs)))
    blk.comment(f"{kind} of every {'x'.join(str(d.taps) for d in dims)} window in one Vector "
                "Engine reduction over an access pattern [rows, outputs..., taps...]")
    blk.line(f"f0 = nl.ndarray((p, {g}, {', '.join(str(d.size_out) for d in dims)}), "
             f"dtype={dtype}, buffer=nl.sbuf)")
    blk.line(f"nisa.tensor_reduce(dst=f0, op={FOLD[kind]}, data=x_sb.ap([{text}], offset=0), "
             f"axis={axes!r})")


def _staged(dims: tuple[Dim, ...]) -> bool:
    return _padded(dims) and dims[-1].size_in * 4 < SHORT_RUN


def _plan(dims: tuple[Dim, ...], kind: str) -> list[tuple[int, list[Pass], dict[str, int]]]:
    """Per dim, innermost first: its passes and the extents of the tiles they write."""
    plan, src = [], "x_sb"
    for i in reversed(range(len(dims))):
        passes, ext = fold_passes(i, dims[i], kind, src)
        plan.append((i, passes, ext))
        src = f"f{i}"
    return plan


def _row_bytes(dims: tuple[Dim, ...], kind: str) -> int:
    """SBUF bytes one row needs: its plane (and stage), every pass's tile, the result."""
    extents = [d.plane for d in dims]
    total = math.prod(extents) * (2 if _staged(dims) else 1)
    for i, _passes, ext in _plan(dims, kind):
        for size in ext.values():
            extents[i] = size
            total += math.prod(extents)
    return 4 * (total + math.prod(d.size_out for d in dims))


def _rows_per_partition(rows: int, per_row: int) -> int:
    """The most rows per partition that divide the rows into whole tiles of 128 partitions,
    fit TILE_BUDGET and leave MIN_TILES tiles to overlap loads, compute and stores."""
    if rows % PMAX:
        return 1
    per_partition = rows // PMAX
    best = 1
    for g in range(1, per_partition + 1):
        if (per_partition % g == 0 and g * per_row <= TILE_BUDGET
                and per_partition // g >= min(MIN_TILES, per_partition)):
            best = g
    return best


def _view(name: str, extents: list[int], g: int, i: int = -1, off: int = 0, step: int = 1,
          count: int = 0) -> str:
    """`name[0:p, 0:g, ...]`, dim i (if any) the window `off + step * j` for j < count."""
    parts = []
    for j, e in enumerate(extents):
        if j == i:
            parts.append(f"{off}:{off + (count - 1) * step + 1}" + (f":{step}" if step > 1 else ""))
        else:
            parts.append(f"0:{e}")
    return f"{name}[0:p, 0:{g}, {', '.join(parts)}]"


def _emit_load(blk: Block, dims: tuple[Dim, ...], kind: str, g: int, first: list[str],
               band: tuple[int, int] | None = None) -> None:
    """x_sb: the tile's planes, the input in the interior and the identity on the border.
    `first`: the input slices of the leading dims (dim 0's band, or the whole dim; dim 1's
    band too when it is banded). `band`: (count, slab row) of a padded band's dim 0, whose
    first input row is the helper's i0."""
    if band is not None:
        _band_load(blk, dims, kind, band)
        return
    sizes = ", ".join(str(d.size_in) for d in dims)
    whole = f"x_v[nl.ds(r0, p), 0:{g}, {', '.join(_lead(first, dims, 'size_in'))}]"
    if not _padded(dims):
        blk.line(f"x_sb = nl.ndarray((p, {g}, {sizes}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.dma_copy(dst=x_sb, src={whole})")
        return
    plane = [d.plane for d in dims]
    blk.line(f"x_sb = nl.ndarray((p, {g}, {', '.join(map(str, plane))}), dtype=nl.float32, "
             "buffer=nl.sbuf)")
    placed = [d.placed() for d in dims]
    blk.comment("the border holds the pool's identity")
    for j, (_first, count, start) in enumerate(placed):
        for lo, hi in ((0, start), (start + count, plane[j])):
            if hi > lo:
                blk.line(f"nisa.memset(dst={_view('x_sb', plane, g, j, lo, 1, hi - lo)}, "
                         f"value={FILL[kind]})")
    inner = f"x_sb[0:p, 0:{g}, {', '.join(f'{s}:{s + c}' for _, c, s in placed)}]"
    src = ", ".join(f"{f}:{f + c}" for f, c, _ in placed)
    if _staged(dims):
        blk.comment("rows this short load contiguously, then land in the plane on the Scalar "
                    "Engine")
        blk.line(f"stage = nl.ndarray((p, {g}, {sizes}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.dma_copy(dst=stage, src={whole})")
        blk.line(f"nisa.activation(dst={inner}, op=nl.copy, data=stage[0:p, 0:{g}, {src}])")
    else:
        blk.line(f"nisa.dma_copy(dst={inner}, src=x_v[nl.ds(r0, p), 0:{g}, {src}])")


def _band_load(blk: Block, dims: tuple[Dim, ...], kind: str, band: tuple[int, int]) -> None:
    """x_sb for a padded band (one row a partition): the identity everywhere but where input
    lands (dim 0's `count` rows from the helper's i0 at slab row `at`, the other dims as
    placed), then one DMA of those rows (whole rows of the inner dims: contiguous)."""
    count, at = band
    plane = [d.plane for d in dims]
    placed = [(0, count, at), *(d.placed() for d in dims[1:])]
    blk.line(f"x_sb = nl.ndarray((p, 1, {', '.join(map(str, plane))}), dtype=nl.float32, "
             "buffer=nl.sbuf)")
    blk.comment("the padding of this band's slab holds the pool's identity")
    for j, (_first, n, start) in enumerate(placed):
        for lo, hi in ((0, start), (start + n, plane[j])):
            if hi > lo:
                blk.line(f"nisa.memset(dst={_view('x_sb', plane, 1, j, lo, 1, hi - lo)}, "
                         f"value={FILL[kind]})")
    if count == 0:
        return
    inner = f"x_sb[0:p, 0:1, {', '.join(f'{s}:{s + n}' for _, n, s in placed)}]"
    src = ", ".join([f"nl.ds(i0, {count})", *(f"{f}:{f + n}" for f, n, _ in placed[1:])])
    blk.line(f"nisa.dma_copy(dst={inner}, src=x_v[nl.ds(r0, p), 0:1, {src}])")



def _emit_tile(kernel: Kernel, dims: tuple[Dim, ...], kind: str, op: Op, out_dtype: str,
               g: int, band_step: int = 0, band: tuple[int, int] | None = None,
               col_step: int = 0) -> str:
    """The tile helper; `band_step` > 0: it takes b0, the first output row of a band of
    dim 0 (input rows from b0 * band_step); `band` (count, slab row): a padded band's
    helper, which also takes i0, its first input row of dim 0; `col_step` > 0: it takes
    y0, the first output row of a band of dim 1 (input rows from y0 * col_step)."""
    fn = kernel.names.fresh("pool_rows")
    blk = Block(depth=1)
    first = ([f"nl.ds(b0 * {band_step}, {dims[0].size_in})"], [f"nl.ds(b0, {dims[0].size_out})"]
             ) if band_step else ([f"0:{dims[0].size_in}"], [f"0:{dims[0].size_out}"])
    if col_step:
        first[0].append(f"nl.ds(y0 * {col_step}, {dims[1].size_in})")
        first[1].append(f"nl.ds(y0, {dims[1].size_out})")
    _emit_load(blk, dims, kind, g, first[0], band)
    shapes = {"x_sb": [d.plane for d in dims]}
    final = nl_dtype(out_dtype) if kind == "max" else "nl.float32"
    if _tiled(dims, g):
        _emit_window_reduce(blk, dims, kind, g, final)
    for i, passes, ext in ([] if _tiled(dims, g) else _plan(dims, kind)):
        d = dims[i]
        blk.comment(f"{kind} over dim {i}: {d.taps} taps (stride {d.step}, dilation {d.dil}) "
                    f"in {len(passes)} pass(es)")
        for dst, a, a_off, a_step, b, b_off, b_step, count in passes:
            if dst not in shapes:
                shapes[dst] = [ext[dst] if j == i else e for j, e in enumerate(shapes[a])]
                dtype = final if dst == "f0" else "nl.float32"
                blk.line(f"{dst} = nl.ndarray((p, {g}, {', '.join(map(str, shapes[dst]))}), "
                         f"dtype={dtype}, buffer=nl.sbuf)")
            out_v = _view(dst, shapes[dst], g, i, 0, 1, count)
            left = _view(a, shapes[a], g, i, a_off, a_step, count)
            if (a, a_off) == (b, b_off):
                blk.line(f"nisa.tensor_copy(dst={out_v}, src={left})")
                continue
            right = _view(b, shapes[b], g, i, b_off, b_step, count)
            blk.line(f"nisa.tensor_tensor(dst={out_v}, data1={left}, data2={right}, "
                     f"op={FOLD[kind]})")
    res = "f0"
    if kind == "avg":
        divisor = op.attr("divisor") or math.prod(d.taps for d in dims)
        blk.comment("the average: 1 / divisor on the Scalar Engine, in the output dtype")
        blk.line(f"res = nl.ndarray((p, {g}, {', '.join(str(d.size_out) for d in dims)}), "
                 f"dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
        blk.line(f"nisa.activation(dst=res, op=nl.copy, data=f0, "
                 f"scale={1.0 / float(str(divisor))!r})")
        res = "res"
    blk.line(f"nl.store(out_v[nl.ds(r0, p), 0:{g}, "
             f"{', '.join(_lead(first[1], dims, 'size_out'))}], {res})")
    params = (", b0, i0" if band else ", b0" if band_step else "") + (", y0" if col_step else "")
    kernel.helpers.append([f"def {fn}(x_v, out_v, r0, p{params}):",
                           f'    """{op.origin}: rows r0..r0+p ({g} rows per partition): load '
                           'their planes once, fold dim by dim, store."""', *blk.lines])
    return fn


def _lead(first: list[str], dims: tuple[Dim, ...], extent: str) -> list[str]:
    """The slices of every dim: `first` for the leading (banded) ones, the rest whole."""
    return [*first, *(f"0:{getattr(d, extent)}" for d in dims[len(first):])]
