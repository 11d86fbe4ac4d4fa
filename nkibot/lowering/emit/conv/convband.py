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

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid
from nkibot.lowering.schedule.convfold import Fold
from nkibot.lowering.schedule.convspec import ConvSpec


def emit_store(blk: Block, spec: ConvSpec, fold: Fold, bias: bool, index: list[str]) -> None:
    """Bias per column (each row of the band repeats the channels' bias), then each row r
    of the band stored as rows r, r + R, ... of the banded dim (the last group's rows past
    the output, `rlast` on, are computed but not stored)."""
    cout, rows, i = spec.cout_g, fold.rows, fold.band
    v = f"s{i}"
    if bias:
        blk.comment("bias: one value per column (output channel of a band row), resident")
        blk.line(f"b_t = b_sb[0:{cout * rows}, 0, 0:1]")
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
