"""Output rows stacked on the stationary columns: a banded (Toeplitz) weight matrix.

With few output channels per group (16 in KernelBench 58, 24 in 70) the stationary side of
every matmul fills cout of its 128 columns, and the cost model charges a matmul by its
moving size alone. A band of R output rows of one stride-1 dim D fills R * cout columns:
column r * cout + co is output row R * m + r. Its partitions stack A blocks of the plane
(block a shifted by a rows of D, as a fold of A taps), so at base shift s = j * A the
weight of (block a, row r) is tap s + a - r, zero past the kernel's edge; ceil((K + R - 1) /
A) base shifts give every row all its K taps. The moving window steps R rows of D (one
output group per step). Output row r of the band is stored from partitions r * cout.. as
rows r, r + R, ... of D, so D is best an outer dim (whole inner rows per DMA run).

Grouped convs stack S torch groups a matmul instead (`stack`): S * cin_g partitions and S *
cout_g columns with block-diagonal weights, one loop iteration per S groups. Channels of
consecutive groups are consecutive, so the stacked group's input, output and bias views
are those of a conv with groups / S groups; only the weights are copied block by block.
"""

from __future__ import annotations

import itertools
import math

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid
from nkibot.lowering.emit.conv import conv
from nkibot.lowering.emit.conv.conv import ConvSpec, Dim
from nkibot.lowering.schedule import convfold
from nkibot.lowering.schedule.convfold import Fold
from nkibot.sim.cost import constants as C

DESCRIPTOR_NS = C.DMA_DESCRIPTOR_NS.value  # the cost model's per-run DMA cost
QUEUES = C.TRN1.dma_queues


def plane(d: Dim, fold: Fold, i: int) -> int:
    """Plane length of dim i as read: the banded dim reads up to row R * (groups - 1) +
    (J - 1) * A of each shifted block (zero past the input)."""
    if i != fold.band:
        return d.plane
    groups = -(-d.size_out // fold.rows)
    return max(d.plane, fold.rows * (groups - 1) + (fold.outer[i] - 1) * fold.sizes[i] + 1)


def planes(spec: ConvSpec, fold: Fold) -> list[int]:
    return [plane(d, fold, i) for i, d in enumerate(spec.dims)]


def score(spec: ConvSpec, fold: Fold, elem_bytes: int) -> tuple[float, float, float]:
    """(modelled ns, its PE ns, its DMA ns) per batch element and group, by the cost model's
    constants (trn1): the Tensor Engine's matmuls x max(N, 64) cycles over the output
    positions (a band's ragged last group computes all its rows) plus the DMA queues'
    time for the plane copies and the output (bytes at 16 x 17 B/ns plus 15 ns a
    contiguous run; a band's output runs are rows of the dims inside it). Summed: by the
    cost model a batch element's loads and stores overlap its matmuls only in part."""
    outs = [-(-d.size_out // fold.rows) if j == fold.band else d.size_out
            for j, d in enumerate(spec.dims)]
    cols = -(-spec.cout_g * fold.rows // PMAX)
    pe = convfold.pe_ns(math.prod(fold.outer) * cols * max(math.prod(outs), 64), elem_bytes)
    copies = fold.blocks * spec.cin_g * math.prod(d.size_in for d in spec.dims) * elem_bytes
    out = spec.cout_g * math.prod(d.size_out for d in spec.dims) * elem_bytes
    if fold.rows > 1:
        run = math.prod(d.size_out for d in spec.dims[fold.band + 1:])
    else:
        run = 1
        for d, t in zip(reversed(spec.dims), reversed(conv._tiles(spec)), strict=True):
            run *= t
            if t < d.size_out:
                break
    runs = copies / (spec.dims[-1].size_in * elem_bytes) + out / (run * elem_bytes)
    dma = convfold.load_ns(copies + out) + runs * DESCRIPTOR_NS / QUEUES
    return pe + dma, pe, dma


def choose(spec: ConvSpec, best: Fold, elem_bytes: int, room: int) -> Fold:
    """The band (dim, R rows, A blocks, whole folds of the other dims) of least `score`
    when it beats the plain fold `best`'s, its plane and weights within `room` elements
    per partition; else `best`. A band is for PE time: one that does not cut it (fewer
    blocks, so fewer plane copies, but more matmuls) or whose DMA time would exceed it is
    not taken (KernelBench 57 and 71, 2-D with 64 and 32 channels: the modelled kernel, DMA
    bound, got slower). Only stride-1, undilated dims band."""
    if spec.cout_g * 2 > PMAX or any(d.up > 1 for d in spec.dims):
        return best
    taps = tuple(d.taps for d in spec.dims)
    least, plain_pe, _ = score(spec, best, elem_bytes)
    found = best
    for i, d in enumerate(spec.dims):
        if d.step != 1 or d.dil != 1 or d.size_out < 2:
            continue
        others = [[f for f in range(1, k + 1) if k % f == 0] if j != i else [1]
                  for j, k in enumerate(taps)]
        for sizes in itertools.product(*others):
            fixed = spec.cin_g * math.prod(sizes)
            for rows in range(2, min(PMAX // spec.cout_g, d.size_out) + 1):
                for a in range(1, min(PMAX // fixed, d.taps + rows - 1) + 1):
                    fold = Fold(tuple(a if j == i else f for j, f in enumerate(sizes)),
                                taps, i, rows)
                    cost, pe, dma = score(spec, fold, elem_bytes)
                    if cost < least and dma <= pe < plain_pe and _fits(spec, fold, room):
                        found, least = fold, cost
    return found


def stack(spec: ConvSpec, elem_bytes: int, phased: bool) -> ConvSpec:
    """`spec` with S torch groups stacked a group: the S (dividing groups, S * cin_g and S *
    cout_g within 128) of least modelled time over all groups, by the form's own chooser
    (by phase: convphase.fold_cost; else the fold and band of least `score`). Stacking
    multiplies the PE array's useful rows and columns by S at the same matmul count per
    group, but leaves fewer rows to fold taps on."""
    from nkibot.lowering.emit.conv import convphase  # it builds on conv too

    best, least = spec, math.inf
    for s in range(1, spec.groups + 1):
        if spec.groups % s or s * max(spec.cin_g, spec.cout_g) > PMAX:
            continue
        cand = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups // s, spec.dims,
                        spec.transposed, s)
        if phased:
            dims = convphase.phase_dims(cand)
            if dims is None:
                continue
            cost = convphase.fold_cost(cand, dims, elem_bytes)[0]
        else:
            if conv._check(cand, "float32") is not None:
                continue
            fold = choose(cand, convfold.choose(cand, elem_bytes), elem_bytes,
                          conv.PLANE_BUDGET // 4)
            cost = score(cand, fold, elem_bytes)[0]
        if cost * cand.groups < least:
            best, least = cand, cost * cand.groups
    return best


def _fits(spec: ConvSpec, fold: Fold, room: int) -> bool:
    weights = spec.cout_g * fold.rows * math.prod(fold.outer)
    return math.prod(planes(spec, fold)) + weights <= room


def emit_store(blk: Block, spec: ConvSpec, fold: Fold, bias: bool, index: list[str]) -> None:
    """Bias per column (each row of the band repeats the channels' bias), then each row r
    of the band stored as rows r, r + R, ... of the banded dim (the last group's rows past
    the output, `rlast` on, are computed but not stored)."""
    cout, rows, i = spec.cout_g, fold.rows, fold.band
    v = f"s{i}"
    if bias:
        blk.line(f"b_t = nl.ndarray(({cout * rows}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"for r in range({rows}):")
        blk.line(f"    nisa.dma_copy(dst=b_t[r * {cout}:(r + 1) * {cout}, 0:1], "
                 f"src=b_v[g, 0:{cout}, 0:1])")
        blk.comment("bias: one value per column (output channel of a band row)")
        blk.line("nisa.tensor_scalar(dst=res, data=acc, op0=nl.add, operand0=b_t)")
    else:
        blk.line("nisa.tensor_copy(dst=res, src=acc)")
    blk.comment(f"band row r: output rows {v}0 * {rows} + r, stepping {rows}")
    blk.line(f"for r in range({rows}):")
    blk.indent()
    blk.line(f"cnt = {v}sz if r < rlast else {v}sz - 1")
    blk.line("if cnt > 0:")
    blk.indent()
    where = list(index)
    where[i] = f"{v}0 * {rows} + r:{v}0 * {rows} + r + (cnt - 1) * {rows} + 1:{rows}"
    tile = [f"0:{v}sz" if j != i else "0:cnt" for j, v in enumerate(
        f"s{j}" for j in range(len(spec.dims)))]
    blk.line(f"nl.store(out_v[n, g, 0:{cout}, {', '.join(where)}], "
             f"res[r * {cout}:(r + 1) * {cout}, {', '.join(tile)}])")
    blk.dedent()
    blk.dedent()


def emit_tile_grid(body: Block, spec: ConvSpec, fold: Fold, tiles: tuple[int, ...],
                   params: str, tile_fn: str) -> None:
    """The output tiles in groups of R rows of the banded dim: the whole groups, then the
    ragged last one (its valid rows `rlast`) in a grid of its own."""
    sp = [f"s{i}" for i in range(len(spec.dims))]
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    i, d, rows = fold.band, spec.dims[fold.band], fold.rows
    whole, last = divmod(d.size_out, rows)
    cols = Axis("c", spec.cout_g * rows, PMAX)
    axes = [cols] + [Axis(v, whole if j == i else e.size_out, t) for j, (v, e, t) in
                     enumerate(zip(sp, spec.dims, tiles, strict=True))]
    emit_grid(body, axes, f"{tile_fn}({params}, {fields}, {rows})", "affine_range")
    if last:
        body.comment(f"the last group: {last} of its {rows} rows are outputs")
        axes = [cols] + [Axis(v, e.size_out, t) for j, (v, e, t) in
                         enumerate(zip(sp, spec.dims, tiles, strict=True)) if j != i]
        emit_grid(body, axes, f"{tile_fn}({params}, {fields}, {last})", "affine_range",
                  {sp[i]: (str(whole), 1)})
