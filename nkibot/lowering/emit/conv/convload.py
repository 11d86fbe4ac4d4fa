"""Code every convolution emitter shares: the HBM views, the resident weights of a fold,
the padded input plane with its zeroed margins, and the tap loop and eviction of one
output phase.
"""

from __future__ import annotations

import math

from nkibot.lowering.emit.builder import PMAX, Block
from nkibot.lowering.emit.rowwise import Output
from nkibot.lowering.schedule import convfold
from nkibot.lowering.schedule.convfold import Fold
from nkibot.lowering.schedule.convspec import ConvSpec
from nkibot.lowering.schedule.phasefold import Phase, PhaseDim


def out_views(extra: tuple[str, ...] = ()) -> str:
    """The output view, then the views the eviction reads (a residual's, a tail's)."""
    return ", ".join(["out_v", *extra])


def emit_views(body: Block, spec: ConvSpec, x: str, w: str, bias: str | None,
               out: Output, pair: bool = False, out_dims: str | None = None) -> None:
    """The HBM views: weights [groups, Cin/g, Cout/g, K...], bias, input and output
    (`out_dims`: its dims after batch and group when not [Cout/g, positions...]: a fused
    pool's or reduction's)."""
    g_, cin_g, cout_g = spec.groups, spec.cin_g, spec.cout_g
    ks = ", ".join(str(d.taps) for d in spec.dims)
    if spec.stack > 1:
        s, ci, co = spec.stack, cin_g // spec.stack, cout_g // spec.stack
        body.comment(f"{s} torch groups stacked a group (block-diagonal weights): weight "
                     f"seen as [groups, {s}, Cin/g, Cout/g, {ks} taps]")
        if spec.transposed:
            body.line(f"w_v = {w}.reshape(({g_}, {s}, {ci}, {co}, {ks}))")
        else:
            perm = ", ".join(str(i) for i in range(4, 4 + len(spec.dims)))
            body.line(f"w_v = {w}.reshape(({g_}, {s}, {co}, {ci}, {ks})).permute((0, 1, 3, 2, "
                      f"{perm}))")
    elif spec.transposed:
        body.comment(f"weight [Cin, Cout/g, taps] seen as [groups, Cin/g, Cout/g, {ks} taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cin_g}, {cout_g}, {ks}))")
    else:
        perm = ", ".join(str(i) for i in range(3, 3 + len(spec.dims)))
        body.comment(f"weight [Cout, Cin/g, taps] seen as [groups, Cin/g, Cout/g, {ks} taps]")
        body.line(f"w_v = {w}.reshape(({g_}, {cout_g}, {cin_g}, {ks})).permute((0, 2, 1, "
                  f"{perm}))")
    if bias is not None:
        body.line(f"b_v = {bias}.reshape(({g_}, {cout_g}, {2 if pair else 1}))")
    ins = ", ".join(str(d.size_in) for d in spec.dims)
    outs = ", ".join(str(d.size_out) for d in spec.dims)
    body.line(f"x_v = {x}.reshape(({spec.batch}, {g_}, {cin_g}, {ins}))")
    body.line(f"out_v = {out.var}.reshape(({spec.batch}, {g_}, {out_dims or f'{cout_g}, {outs}'}))")


def emit_resident_bias(body: Block, spec: ConvSpec, cols: int, rows: int = 1) -> None:
    """b_sb: group g's per-channel columns (the bias, or a folded norm's (scale, shift)),
    loaded once per group, [channels, channel tiles of 128, cols]; `rows` > 1 repeats the
    channels down the partitions once per band row (a band's partitions are rows x
    channels). Each output tile loaded its columns before: a DMA of 4-byte runs a tile,
    30 us of level 2 71's 1,097 us of DMA time (model estimate trn1)."""
    cout = spec.cout_g
    body.comment("the per-channel columns (" + ("bias" if cols == 1 else "scale, shift")
                 + ") stay resident too")
    if rows > 1:
        body.line(f"b_sb = nl.ndarray(({cout * rows}, 1, {cols}), dtype=nl.float32, "
                  "buffer=nl.sbuf)")
        for r in range(rows):
            body.line(f"nisa.dma_copy(dst=b_sb[{r * cout}:{(r + 1) * cout}, 0, 0:{cols}], "
                      f"src=b_v[g, 0:{cout}, 0:{cols}])")
        return
    tiles = -(-cout // PMAX)
    body.line(f"b_sb = nl.ndarray(({min(cout, PMAX)}, {tiles}, {cols}), dtype=nl.float32, "
              "buffer=nl.sbuf)")
    for j in range(tiles):
        lo, c = j * PMAX, min(PMAX, cout - j * PMAX)
        body.line(f"nisa.dma_copy(dst=b_sb[0:{c}, {j}, 0:{cols}], "
                  f"src=b_v[g, {lo}:{lo + c}, 0:{cols}])")


def bias_cols(spec: ConvSpec, cols: str) -> str:
    """An output tile's view (channels c0..c0+csz) of the resident columns b_sb."""
    return f"b_sb[0:csz, {f'c0 // {PMAX}' if spec.cout_g > PMAX else '0'}, {cols}]"


def emit_plane(body: Block, spec: ConvSpec, fold: Fold, compute: str,
               whole: bool = False) -> None:
    """x_sb: the padded (zero-inserted when transposed) input plane of batch n, group g,
    once per partition block of the fold; only the margins no input covers are zeroed
    (`whole`: every position written, a block's tail past its shifted input too, for
    matmuls that read blocks under zero weights: an unwritten NaN times zero is NaN)."""
    cin_g = spec.cin_g
    what = "zero-inserted, padded" if spec.transposed else "zero-padded"
    copies = f", {fold.blocks} times: block u shifted left by u * dilation" if (
        fold.blocks > 1) else ": loaded once"
    body.comment(f"the {what} input plane of batch n, group g{copies}")
    planes = [d.plane for d in spec.dims]
    if fold.rows > 1:
        planes = convfold.planes(spec, fold)
    body.line(f"x_sb = nl.ndarray(({cin_g * fold.blocks}, {', '.join(map(str, planes))}), "
              f"dtype={compute}, buffer=nl.sbuf)")
    placed = [d.placed() for d in spec.dims]
    shifts = [convfold.flat_shift(spec.dims, planes, placed, u) for u in fold.offsets()]
    if fold.blocks > 1 and fold.rows == 1 and all(f is not None for f in shifts) and not any(
            convfold.margins(spec.dims, planes, placed, u, fold.band) for u in fold.offsets()):
        size = math.prod(planes)
        body.comment("each block one contiguous run a partition: the flat input from the "
                     "block's shift on (the positions past a row's shifted edge take the next "
                     "row's values; no tap reads them)")
        body.line(f"x_flat = x_sb.reshape(({cin_g * fold.blocks}, {size}))")
        body.line(f"x_f = x_v.reshape(({spec.batch}, {spec.groups}, {cin_g}, {size}))")
        for b, off in enumerate(shifts):
            assert off is not None
            body.line(f"nisa.dma_copy(dst=x_flat[{b * cin_g}:{(b + 1) * cin_g}, 0:{size - off}], "
                      f"src=x_f[n, g, 0:{cin_g}, {off}:{size}])")
            if whole and off:
                body.line(f"nisa.memset(dst=x_flat[{b * cin_g}:{(b + 1) * cin_g}, "
                          f"{size - off}:{size}], value=0.0, engine=nisa.engine.gpsimd)")
        return
    blocks = [(u, convfold.margins(spec.dims, planes, placed, u, fold.band, whole))
              for u in fold.offsets()]
    # a region every block zeroes (the whole plane of a zero-inserted input) is one memset
    # across all the blocks' partitions: the engine's time is per partition's elements
    common = [r for r in blocks[0][1] if all(r in m for _, m in blocks)] if (
        len(blocks) > 1) else []
    for region in common:
        zero_region(body, f"0:{cin_g * fold.blocks}", region)
    for b, (u, regions) in enumerate(blocks):
        part = f"{b * cin_g}:{(b + 1) * cin_g}"
        for region in regions:
            if region not in common:
                zero_region(body, part, region)
        here = convfold.block_slices(spec.dims, placed, u)
        if here is not None:
            place_block(body, spec, part, here, compute)


def zero_region(body: Block, part: str, region: list[str]) -> None:
    body.line(f"nisa.memset(dst=x_sb[{part}, {', '.join(region)}], value=0.0, "
              "engine=nisa.engine.gpsimd)")


def place_block(body: Block, spec: ConvSpec, part: str,
           here: tuple[list[str], list[str], list[str]], compute: str) -> None:
    """One partition block's input into its plane: a DMA, or a zero-insertion scatter."""
    dst, src, counts = here
    cin = spec.cin_g
    if any(d.up > 1 for d in spec.dims):
        _scatter(body, spec, f"x_v[n, g, 0:{cin}, {', '.join(src)}]",
                 f"x_sb[{part}, {', '.join(dst)}]", counts, compute)
    else:
        body.line(f"nisa.dma_copy(dst=x_sb[{part}, {', '.join(dst)}], "
                  f"src=x_v[n, g, 0:{cin}, {', '.join(src)}])")


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


def emit_weights(body: Block, spec: ConvSpec, fold: Fold, compute: str) -> None:
    """w_sb[(block, cin), cout, J...]: partition block u, position j holds tap j * f + u
    (transposed: the flipped tap, at position J - 1 - j); positions past the kernel's edge
    stay unwritten and no matmul reads them."""
    rows, outer = spec.cin_g * fold.blocks, ", ".join(str(j) for j in fold.outer)
    cin, cout = spec.cin_g, spec.cout_g
    body.line(f"w_sb = nl.ndarray(({rows}, {cout * fold.rows}, {outer}), dtype={compute}, "
              "buffer=nl.sbuf)")
    if fold.blocks == 1 and fold.rows == 1 and spec.stack == 1:
        body.line("nisa.dma_copy(dst=w_sb, src=w_v[g])")
        return
    if fold.rows > 1:
        body.comment(f"columns r * {cout} + co: output row r of the band; the pairs (block, "
                     "row) no tap joins stay zero")
    zero_weights(body, spec, "w_sb", fold.rows > 1)
    for b, u in enumerate(fold.offsets()):
        for r in range(fold.rows):
            here = _tap_slices(spec, fold, u, r)
            if here is not None:
                weight_copy(body, spec, "w_sb", (b * cin, r * cout), here)


def zero_weights(body: Block, spec: ConvSpec, name: str, banded: bool = False) -> None:
    """Weights with entries no copy writes (a band's, stacked groups' off-diagonal blocks)
    start as zeros."""
    if spec.stack > 1:
        body.comment(f"{spec.stack} groups stacked on both sides: the blocks between "
                     "different groups stay zero")
    if spec.stack > 1 or banded:
        body.line(f"nisa.memset(dst={name}, value=0.0, engine=nisa.engine.gpsimd)")


def weight_copy(body: Block, spec: ConvSpec, name: str, at: tuple[int, int],
                here: tuple[list[str], list[str]]) -> None:
    """The weights of one partition block and column block: `name`[at[0].., at[1].., dst]
    from w_v[g, .., src]; with groups stacked, one copy per torch group onto its diagonal
    block."""
    (row, col), (dst, src) = at, here
    s = spec.stack
    ci, co = spec.cin_g // s, spec.cout_g // s
    for k in range(s):
        grp = f"g, {k}" if s > 1 else "g"
        body.line(f"nisa.dma_copy(dst={name}[{row + k * ci}:{row + (k + 1) * ci}, "
                  f"{col + k * co}:{col + (k + 1) * co}, {', '.join(dst)}], "
                  f"src=w_v[{grp}, 0:{ci}, 0:{co}, {', '.join(src)}])")


def _tap_slices(spec: ConvSpec, fold: Fold, u: tuple[int, ...], r: int
                ) -> tuple[list[str], list[str]] | None:
    """(weight positions, kernel taps) of partition block u for output row r of the band
    (None when no tap joins them). Position p of a dim holds tap p * f + u (transposed:
    the flipped tap at position J - 1 - p); in the banded dim, row r's tap there is
    p * f + u - r, zero where that is past the kernel's edge."""
    dst, src = [], []
    for i, (k, f, j, ui) in enumerate(zip(fold.taps, fold.sizes, fold.outer, u, strict=True)):
        if i == fold.band:
            base = k - 1 - (j - 1) * f - ui + r if spec.transposed else ui - r
            lo, hi = max(0, -(base // f)), min(j - 1, (k - 1 - base) // f)
            if hi < lo:
                return None
            n, first = hi - lo + 1, base + lo * f
            dst.append(f"{lo}:{hi + 1}")
            src.append(f"{first}:{first + f * (n - 1) + 1}" + (f":{f}" if n > 1 else ""))
            continue
        n = -(-(k - ui) // f)
        lo = k - 1 - ui - f * (n - 1) if spec.transposed else ui
        dst.append(f"{j - n}:{j}" if spec.transposed else f"0:{n}")
        src.append(f"{lo}:{lo + f * (n - 1) + 1}" + (f":{f}" if f > 1 and n > 1 else ""))
    return dst, src


def emit_tap_loop(blk: Block, i: int, v: str, ph: Phase, p: PhaseDim) -> tuple[str, str]:
    """(tap index, plane window) of phase `ph` along unfolded dim i (tile variable v): a
    loop `j{i}` over its taps is opened when it has several (the caller closes it)."""
    start = f"{v}0 // {p.stride}" if p.stride > 1 else f"{v}0"
    if ph.count > 1:
        blk.line(f"for j{i} in nl.affine_range({ph.count}):")
        blk.indent()
    j = f"j{i}" if ph.count > 1 else "0"
    tap = f"{ph.first} + {j} * {ph.step}" if ph.count > 1 else str(ph.first)
    off = f"{ph.offset} - {j} * {ph.shift}" if ph.count > 1 else str(ph.offset)
    return tap, f"nl.ds({start} + {off}, q{i})"


#: A clamp bound the eviction applies after the bias: (maximum or minimum, literal).
Bound = tuple[str, float] | None


def _ops(bias: bool, bound: Bound) -> str:
    """The tensor_scalar ops: the bias add, then the bound."""
    ops = ["nl.add", "b_t"] if bias else []
    if bound is not None:
        ops += [f"nl.{bound[0]}", repr(bound[1])]
    return ", ".join(f"op{i // 2}={ops[i]}, operand{i // 2}={ops[i + 1]}"
                     for i in range(0, len(ops), 2))


def emit_empty_phase(blk: Block, view: str, bias: bool, bound: Bound = None) -> None:
    """A phase no tap reaches: its view of the tile is zero (plus the bias, then the
    bound); closes the phase's `if`."""
    blk.comment("no tap reaches this phase: zero" + (" plus the bias" if bias else ""))
    blk.line(f"nisa.memset(dst=res[0:csz, {view}], value=0.0)")
    if bias or bound is not None:
        blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=res[0:csz, {view}], "
                 f"{_ops(bias, bound)})")
    blk.dedent()


def emit_evict(blk: Block, view: str, bias: bool, engine: str = "vector",
               bound: Bound = None) -> None:
    """The phase's PSUM sums `acc` into its strided view of the tile (plus the bias, then
    the `bound`: a ReLU's on the Scalar Engine), on `engine` (phasefold.evict_engines);
    closes the phase's `if`."""
    if engine == "scalar":
        assert bound in (None, ("maximum", 0.0)), bound
        func = "nl.copy" if bound is None else "nl.relu"
        blk.line(f"nisa.activation(dst=res[0:csz, {view}], op={func}, data=acc"
                 + (", bias=b_t)" if bias else ")"))
    elif bias or bound is not None:
        blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=acc, {_ops(bias, bound)})")
    else:
        blk.line(f"nisa.tensor_copy(dst=res[0:csz, {view}], src=acc)")
    blk.dedent()
