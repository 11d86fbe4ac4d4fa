"""A convolution plane over the SBUF budget, in slabs: bands of output rows of dim 0, each
loading the input rows it reads (its halo included) and the full extent of the other dims;
when even one output row of dim 0 is too big (a 3-D conv with large H x W planes), bands of
rows of dim 1 too: a slab is then the taps along dim 0 x a band of rows of dim 1 with its
halo x the full inner dims. `convspec.check` chooses the bands.

Which input rows a band reads is known when lowering: the kernel passes each band, per row
shift u of the fold, (first input row, count, slab row) as a tuple (`rows` for dim 0,
`cols` for dim 1), so one band helper serves every band of its size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid
from nkibot.lowering.emit.conv import convload
from nkibot.lowering.emit.rowwise import Kernel
from nkibot.lowering.schedule import convfold
from nkibot.lowering.schedule.convfold import Fold
from nkibot.lowering.schedule.convspec import ConvSpec, Dim, out_tiles, slab_rows

Slab = tuple[tuple[int, int], ...]  # per banded dim: (output rows per band, per tile)

# per banded dim: the band helper's (first input row, count, slab row) names, its tuple
# of them per fold shift, and its first output row
_VARS = (("i0", "icount", "j0", "rows", "z0"), ("i1", "icount1", "j1", "cols", "y0"))


def band_starts(banded: int) -> list[str]:
    """The band helper's first output row of each banded dim (the tile helper adds them)."""
    return [v[4] for v in _VARS[:banded]]


#: A pool fused into the tiles (convpool.WindowForm): (kernel, pooled extents, pooled
#: positions per tile), per dim; the band helper's grid then runs over pooled positions.
Windows = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def emit_helpers(kernel: Kernel, spec: ConvSpec, slab: Slab, bias: bool, tile_fn: str,
                 compute: str, fold: Fold, extra: tuple[str, ...],
                 windows: Windows | None = None) -> dict[tuple[int, ...], str]:
    """A band helper per band size (output rows of each banded dim), by size."""
    sizes = itertools.product(*({min(rows, d.size_out - z) for z in range(0, d.size_out, rows)}
                                for (rows, _), d in zip(slab, spec.dims, strict=False)))
    tiles = tuple(t for _, t in slab)
    return {key: _helper(kernel, spec, bias, tile_fn, compute, (key, tiles), fold, extra,
                         windows) for key in sorted(sizes)}


def emit_bands(body: Block, spec: ConvSpec, slab: Slab, head: str,
               bands: dict[tuple[int, ...], str], fold: Fold,
               pooled: Callable[[int], None] | None = None) -> None:
    """One call per band (per pair of bands of dims 0 and 1), with the input rows each row
    shift of the fold reads; closes the batch and group loops the caller opened. `pooled`:
    a global pool's (convtail.py) fold, given its partials' count; each band is then told
    its first column of them."""
    if len(slab) == 1:
        body.comment(f"bands of {slab[0][0]} output rows; each loads the input rows it reads")
    else:
        body.comment(f"bands of {slab[0][0]} output row of dim 0 x {slab[1][0]} of dim 1; each "
                     "loads the input rows it reads")
    ranges = [[(z, min(rows, d.size_out - z)) for z in range(0, d.size_out, rows)]
              for (rows, _), d in zip(slab, spec.dims, strict=False)]
    column = 0
    loads_flat = flat(spec, fold, len(slab))
    for starts in itertools.product(*ranges):
        args = []
        for k, (z, size) in enumerate(starts):
            d = spec.dims[k]
            shifts = [flat_band(d, fold, z, size, u) if loads_flat else
                      convfold.shifted(band(d, z, size), d, u * d.dil)
                      for u in range(fold.sizes[k])]
            if k:  # a band of dim 1 wholly in the padding: nothing placed, all zeroed
                shifts = [s if s[1] > 0 else (s[0], 0, 0) for s in shifts]
            args += [str(z), repr(tuple(shifts))]
        if pooled is not None:
            args.append(str(column))
            column += band_tiles(spec, tuple(s for _, s in starts), tuple(t for _, t in slab))
        body.line(f"{bands[tuple(s for _, s in starts)]}({head}, {', '.join(args)})")
    if pooled is not None:
        pooled(column)
    body.dedent()
    body.dedent()


def band_count(spec: ConvSpec, slab: Slab) -> int:
    """Tiles in all the bands of one batch element (a global pool's partials)."""
    ranges = [[min(rows, d.size_out - z) for z in range(0, d.size_out, rows)]
              for (rows, _), d in zip(slab, spec.dims, strict=False)]
    tiles = tuple(t for _, t in slab)
    return sum(band_tiles(spec, sizes, tiles) for sizes in itertools.product(*ranges))


def band_tiles(spec: ConvSpec, sizes: tuple[int, ...], tiles: tuple[int, ...]) -> int:
    """Tiles (of 128 channels and of positions) in one band of `sizes` output rows."""
    count = -(-spec.cout_g // PMAX)
    nb = len(sizes)
    for size, t in [*zip(sizes, tiles, strict=True),
                    *((d.size_out, t) for d, t in zip(spec.dims[nb:], out_tiles(spec)[nb:],
                                                      strict=True))]:
        count *= -(-size // t)
    return count


def band(d: Dim, z0: int, zsz: int) -> tuple[int, int, int]:
    """(first input row, count, slab row it lands on) for output rows z0..z0+zsz."""
    lo, hi = z0 * d.step, z0 * d.step + slab_rows(d, zsz)
    first = max(0, -((d.lead - lo) // d.up))
    last = min(d.size_in - 1, (hi - 1 - d.lead) // d.up)
    return first, max(0, last - first + 1), first * d.up + d.lead - lo


def flat(spec: ConvSpec, fold: Fold, banded: int) -> bool:
    """Whether a band loads each block as one contiguous run a partition: one banded dim,
    no output rows on the stationary side, and every block's input unpadded and not
    zero-inserted, so that block u is the flat input from its shift on, as
    `convload.emit_plane` loads a whole plane (a band of rows is a plane of fewer rows).
    Level 2 54 (Conv2d 8 -> 64 over 256 x 256): row-by-row copies of 1 KiB runs and the
    halo loaded into every block put its DMA queues at 0.86 of their bandwidth and 1.13
    times the bytes; flat, 8 KiB runs and only the rows each block's windows read."""
    if banded != 1 or fold.rows > 1:
        return False
    placed = [d.placed() for d in spec.dims]
    planes = [d.plane for d in spec.dims]
    return all(convfold.flat_shift(spec.dims, planes, placed, u) is not None
               for u in fold.offsets())


def flat_rows(d: Dim, fold: Fold, rows: int) -> int:
    """Plane rows of the banded dim a flat band holds per block: those the windows of
    `rows` output rows read at every base tap of the dim (a block holds the input from its
    own shift on, so the halo of the taps it stacks is no row of its own)."""
    return (rows - 1) * d.step + 1 + (fold.outer[0] - 1) * fold.sizes[0] * d.dil


def flat_band(d: Dim, fold: Fold, z0: int, rows: int, u: int) -> tuple[int, int, int]:
    """(first input row, count, slab row 0) of block row shift u in a flat band."""
    first = z0 * d.step + u * d.dil
    return first, max(0, min(flat_rows(d, fold, rows), d.size_in - first)), 0


def _flat_loads(blk: Block, spec: ConvSpec, fold: Fold, need: int) -> None:
    """Each block one DMA: rows[u0] of the input from the block's shift on (the positions
    past a row's shifted edge take the next row's values; no tap reads them)."""
    cin, rest = spec.cin_g, spec.dims[1:]
    inner = math.prod(d.size_in for d in rest)
    blk.comment("each block one contiguous run a partition: the flat input rows from the "
                "block's shift on (the positions past a row's shifted edge take the next "
                "row's values; no tap reads them)")
    blk.line(f"x_flat = x_sb.reshape(({cin * fold.blocks}, {need * inner}))")
    blk.line(f"x_f = x_v.reshape(({spec.batch}, {spec.groups}, {cin}, "
             f"{spec.dims[0].size_in * inner}))")
    placed = [d.placed() for d in rest]
    planes = [d.plane for d in rest]
    last = -1
    for b, u in enumerate(fold.offsets()):
        off = convfold.flat_shift(rest, planes, placed, u[1:])
        assert off is not None
        if u[0] != last:
            blk.line(f"i0, icount, _ = rows[{u[0]}]")
            last = u[0]
        tail = f" - {off}" if off else ""
        head = f" + {off}" if off else ""
        blk.line(f"nisa.dma_copy(dst=x_flat[{b * cin}:{(b + 1) * cin}, 0:icount * {inner}{tail}], "
                 f"src=x_f[n, g, 0:{cin}, i0 * {inner}{head}:(i0 + icount) * {inner}])")


def _block(blk: Block, spec: ConvSpec, group: list[tuple[int, tuple[int, ...]]],
           slabs: list[int], compute: str) -> None:
    """Partition blocks of one row shift of the banded dims (consecutive, so their
    partitions are one range): zero what they read and no input covers, then load each
    block's rows."""
    nb, cin = len(slabs), spec.cin_g
    banded, rest = spec.dims[:nb], spec.dims[nb:]
    names, u = _VARS[:nb], group[0][1]
    placed = [d.placed() for d in rest]
    heres = [(b, w, convfold.block_slices(rest, placed, w[nb:])) for b, w in group]
    whole = [f"0:{d.plane}" for d in rest]
    part = f"{group[0][0] * cin}:{(group[-1][0] + 1) * cin}"
    zeroed = any(d.up > 1 for d in banded)
    for b, _, here in heres:
        if here is None and not zeroed:  # zero-inserted slabs are zeroed whole in _helper
            convload.zero_region(blk, f"{b * cin}:{(b + 1) * cin}",
                                 [*(f"0:{s}" for s in slabs), *whole])
    if all(here is None for _, _, here in heres):
        return
    for k, (d, (_, count, j, _, _)) in enumerate(zip(banded, names, strict=True)):
        if not zeroed:
            covered = [f"{v[2]}:{v[2]} + {v[1]}" for v in names[:k]]
            after = [f"0:{s}" for s in slabs[k + 1:]]
            for lo, hi in (("0", j), (f"{j} + {count}", str(slabs[k] - u[k] * d.dil))):
                blk.line(f"if {hi} > {lo}:")
                blk.indent()
                convload.zero_region(blk, part, [*covered, f"{lo}:{hi}", *after, *whole])
                blk.dedent()
        blk.line(f"if {count} > 0:" + ("  # a band wholly in the padding reads no input"
                                       if k == 0 else ""))
        blk.indent()
    inner = [f"{v[2]}:{v[2]} + {v[1]}" for v in names]
    rows = [f"{j}:{j} + ({c} - 1) * {d.up} + 1" + (f":{d.up}" if d.up > 1 else "")
            for d, (_, c, j, _, _) in zip(banded, names, strict=True)]
    for b, w, here in heres:
        if here is None:
            continue
        one = f"{b * cin}:{(b + 1) * cin}"
        if not zeroed:
            for region in convfold.margins(rest, [d.plane for d in rest], placed, w[nb:]):
                convload.zero_region(blk, one, [*inner, *region])
        dst, src, counts = here
        convload.place_block(blk, spec, one, (
            [*rows, *dst], [*(f"nl.ds({v[0]}, {v[1]})" for v in names), *src],
            [*(v[1] for v in names), *counts]), compute)
    for _ in range(nb):
        blk.dedent()


def _slab_loads(blk: Block, spec: ConvSpec, fold: Fold, slabs: list[int], compute: str
                ) -> None:
    """Each block's rows of a band (or slab) placed with its margins zeroed, block by block
    (the band's halo included: `slabs` rows of each banded dim)."""
    nb = len(slabs)
    rest = spec.dims[nb:]
    if nb == 1:
        blk.comment("partition block u: the band shifted left by u * dilation; rows[u0] = "
                    "(first input row, count, band row); what no input covers is zeroed")
    else:
        blk.comment("partition block u: the slab shifted left by u * dilation; rows[u0] and "
                    "cols[u1] = (first input row, count, slab row) of dims 0 and 1; what no "
                    "input covers is zeroed")
    if any(d.up > 1 for d in spec.dims[:nb]):
        blk.comment("zero-inserted: the whole slab is zeroed once across every block's "
                    "partitions (the engine's time is per partition's elements), then each "
                    "block's input is spread into it")
        convload.zero_region(blk, f"0:{spec.cin_g * fold.blocks}",
                             [*(f"0:{s}" for s in slabs), *(f"0:{d.plane}" for d in rest)])
    # one block at a time for a band of dim 0 alone; with dim 1 banded too, the blocks of
    # one row shift (u0, u1) zero their band margins together
    blocks = list(enumerate(fold.offsets()))
    groups = [[bu] for bu in blocks] if nb == 1 else [
        list(g) for _, g in itertools.groupby(blocks, key=lambda bu: bu[1][:nb])]
    for group in groups:
        u = group[0][1]
        for k, v in enumerate(_VARS[:nb]):
            blk.line(f"{v[0]}, {v[1]}, {v[2]} = {v[3]}[{u[k]}]")
        _block(blk, spec, group, slabs, compute)


def _helper(kernel: Kernel, spec: ConvSpec, bias: bool, tile_fn: str, compute: str,
            shape: tuple[tuple[int, ...], tuple[int, ...]], fold: Fold,
            extra: tuple[str, ...], windows: Windows | None = None) -> str:
    """A band of `shape[0]` output rows of each banded dim from z0 (and y0): load the input
    rows it reads, then its tiles of `shape[1]` rows."""
    fn = kernel.names.fresh("conv_band")
    blk = Block(depth=1)
    (sizes, tiles), nb = shape, len(shape[0])
    rest = spec.dims[nb:]
    loads_flat = flat(spec, fold, nb)
    slabs = ([flat_rows(spec.dims[0], fold, sizes[0])] if loads_flat else
             [slab_rows(d, s) for d, s in zip(spec.dims, sizes, strict=False)])
    plane = ", ".join([*map(str, slabs), *(str(d.plane) for d in rest)])
    blk.line(f"x_sb = nl.ndarray(({spec.cin_g * fold.blocks}, {plane}), dtype={compute}, "
             "buffer=nl.sbuf)")
    if loads_flat:
        _flat_loads(blk, spec, fold, slabs[0])
    else:
        _slab_loads(blk, spec, fold, slabs, compute)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    starts = ", ".join(band_starts(nb))
    params = "x_sb, w_sb, " + ("b_sb, " if bias else "") + convload.out_views(extra) + (
        f", n, g, {starts}")
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", spec.cout_g, PMAX)] + [
        Axis(v, s, t) for v, s, t in zip(sp, sizes, tiles, strict=False)] + [
        Axis(v, d.size_out, t) for v, d, t in zip(sp[nb:], rest, out_tiles(spec)[nb:],
                                                  strict=True)]
    if windows is not None:  # over pooled positions: a conv tile is k times as long per dim
        ks, pooled_dims, ptiles = windows
        fields = "{c0}, {csz}, " + ", ".join(f"{{{v}0}} * {k}, {{{v}sz}} * {k}" for v, k in zip(
            sp, ks, strict=True)) + "".join(f", {{{v}0}}, {{{v}sz}}" for v in sp)
        axes = [Axis("c", spec.cout_g, PMAX)] + [
            Axis(v, s // k, min(t, s // k)) for v, s, k, t in zip(sp, sizes, ks, ptiles,
                                                                  strict=False)] + [
            Axis(v, p, t) for v, p, t in zip(sp[nb:], pooled_dims[nb:], ptiles[nb:],
                                             strict=True)]
    pooled = "part" in extra  # a global pool's partials: this band's from column t0
    emit_grid(blk, axes, f"{tile_fn}({params}, {fields}" + (", t0 + {t})" if pooled else ")"),
              "affine_range", index=() if pooled else None)
    head = "x_v, w_sb, " + ("b_sb, " if bias else "") + convload.out_views(extra) + ", n, g"
    args = ", ".join(f"{v[4]}, {v[3]}" for v in _VARS[:nb]) + (", t0" if pooled else "")
    what = (f"Output rows z0..z0+{sizes[0]}, band-relative tiles." if nb == 1 else
            f"Output rows z0..z0+{sizes[0]} of dim 0 and y0..y0+{sizes[1]} of dim 1, "
            "slab-relative tiles.")
    kernel.helpers.append([f"def {fn}({head}, {args}):", f'    """{what}"""', *blk.lines])
    return fn
