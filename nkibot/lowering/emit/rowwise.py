"""Kernels for elementwise / row-reduction / whole-tensor-reduction graphs.

Shape of the generated code: one helper per stage computing one `[p, q]` tile (p <= 128
partitions), called from the `@nki.jit` kernel over all full tiles with `nl.affine_range`
and once more, with static bounds, for the ragged remainder. Whole-tensor reductions
accumulate per-partition partials across tiles (so those loops are sequential), then
fold the 128 partials with one Tensor Engine transpose and a free-axis reduction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nkibot.lowering.emit import fused
from nkibot.lowering.emit.body import REDUCE_NL, TileEmitter
from nkibot.lowering.emit.builder import (
    PMAX,
    Axis,
    Block,
    Names,
    ds,
    emit_grid,
    nl_dtype,
    transposed_store,
)
from nkibot.lowering.frontend.ir import REDUCE, Op, Ref
from nkibot.lowering.schedule.layout import (
    FULL,
    ROW,
    TOTAL,
    Frame,
    LayoutError,
    Placement,
    Resolved,
)
from nkibot.sim.cost.quick import SBUF_BYTES

QMAX = 2048  # free-dim tile for plain elementwise graphs: 8 KiB of fp32 per partition
SBUF_BUDGET = SBUF_BYTES * 5 // 6  # bytes per partition our live fp32 tiles may take (of 192 KiB)
ACC_OP = {"rsum": "nl.add", "rmax": "nl.maximum", "rmin": "nl.minimum", "rprod": "nl.multiply"}
ACC_INIT = {"rsum": "0.0", "rmax": "-3.0e38", "rmin": "3.0e38", "rprod": "1.0"}


@dataclass
class Output:
    name: str
    var: str  # the HBM tensor in the kernel
    shape: tuple[int, ...]
    dtype: str


@dataclass
class Kernel:
    """Pieces of the module being written: helpers above, kernel body below."""

    helpers: list[list[str]] = field(default_factory=list)
    body: Block = field(default_factory=lambda: Block(depth=1))
    names: Names = field(default_factory=Names)
    hbm_views: dict[str, str] = field(default_factory=dict)  # view param -> its definition
    leaf_views: dict[str, str] = field(default_factory=dict)  # leaf view -> view param
    #: tiling choices forced for a variant (decision -> candidate name), and the
    #: (decision, candidate) pairs that fit but were not chosen (`tiling.others`)
    choices: dict[str, str] = field(default_factory=dict)
    alternatives: list[tuple[str, str]] = field(default_factory=list)


def view_definition(res: Resolved, pl: Placement, name: str) -> str:
    view, kind = res.views[name], pl.kinds[name]
    frame = pl.frame
    outer = frame.outer if pl.outer_varies[name] else 1
    rows = frame.rows if kind in (FULL, ROW) else 1
    cols = frame.cols if kind in (FULL, "col") else 1
    if view.sliced:
        if frame.perm:
            raise LayoutError("a sliced input with a middle-dim reduction")
        cols = view.base_cols
    return hbm_view(view.leaf.name, outer, rows, cols, frame)


def hbm_view(tensor: str, outer: int, rows: int, cols: int, frame: Frame) -> str:
    """The (O, R, C) view of an HBM tensor, or (O, C, R) as stored for a middle-dim frame.

    With the reduced dim in the middle a FULL tile [p rows, q reduced] is stored as [q, p]:
    the view stays natural (contiguous runs of p elements) and `transposed_load` /
    `transposed_store` move it through the Tensor Engine, instead of a strided DMA view
    whose every element is its own 4-byte descriptor (the cost model's slowest case).
    """
    if frame.perm and cols > 1:
        if rows > 1:
            return f"{tensor}.reshape(({outer}, {cols}, {rows}))"
        return f"{tensor}.reshape(({outer}, {cols}, {rows})).permute((0, 2, 1))"
    return f"{tensor}.reshape(({outer}, {rows}, {cols}))"


def emit_rowwise(res: Resolved, pl: Placement, outputs: list[Output], kernel: Kernel) -> None:
    stages = _stage_count(res, pl, outputs)
    final = TileEmitter(res, pl, kernel.body, kernel.names, final=True)
    accs = _allocate_accumulators(res, pl, kernel)
    for stage in range(stages):
        _emit_stage(res, pl, outputs, kernel, stage, final, accs)
        for op in res.ops:
            if op.name in accs and pl.stage[_src(res, op)] == stage:
                final.totals[op.name] = _fold(kernel, op, accs[op.name])
    for out in outputs:
        if pl.kinds[res.target(out.name)] == TOTAL:
            _store_total(kernel, final, out)


def _src(res: Resolved, op: Op) -> str:
    arg = op.args[0]
    assert isinstance(arg, Ref)
    return res.target(arg.name)


def _stage_count(res: Resolved, pl: Placement, outputs: list[Output]) -> int:
    stages = [pl.stage[res.target(o.name)] for o in outputs]
    stages += [pl.stage[_src(res, op)] for op in res.ops
               if op.op in REDUCE and pl.kinds[op.name] == TOTAL]
    return max(stages, default=0) + 1


def _allocate_accumulators(res: Resolved, pl: Placement, kernel: Kernel) -> dict[str, str]:
    accs = {}
    for op in res.ops:
        if op.op in REDUCE and pl.kinds[op.name] == TOTAL:
            var = kernel.names.fresh(f"acc_{op.name}")
            kernel.body.comment(f"per-partition partials of {op.origin} ({op.op[1:]} over all)")
            kernel.body.line(f"{var} = nl.full(({PMAX}, 1), {ACC_INIT[op.op]}, "
                             f"dtype=nl.float32, buffer=nl.sbuf)")
            accs[op.name] = var
    return accs


def _emit_stage(res: Resolved, pl: Placement, outputs: list[Output], kernel: Kernel,
                stage: int, final: TileEmitter, accs: dict[str, str]) -> None:
    block = Block(depth=1)
    names = Names(set(kernel.names.taken) | {"o", "r0", "p", "c0", "q"})
    tile = TileEmitter(res, pl, block, names, views=kernel.leaf_views,
                       totals=dict(final.totals), need_total=final.value, hoist=kernel.body,
                       aligned_tiles=True)
    params: list[str] = []
    mine = [op for op in res.ops if op.name in accs and pl.stage[_src(res, op)] == stage]
    for op in mine:
        _accumulate(tile, res, pl, op, accs[op.name])
        params.append(accs[op.name])
    stores = [o for o in outputs if pl.kinds[res.target(o.name)] in (FULL, ROW)
              and pl.stage[res.target(o.name)] == stage]
    for out in stores:
        params.append(_store_tile(tile, kernel, res, pl, out))
    if not mine and not stores:
        return
    for name, param in tile.views.items():
        if param not in kernel.hbm_views:
            kernel.hbm_views[param] = view_definition(res, pl, name)
            kernel.body.line(f"{param} = {kernel.hbm_views[param]}")
    kernel.names.taken |= names.taken
    params = tile.used_views + params + tile.used_totals
    fn = kernel.names.fresh(f"stage{stage}_tile")
    head = [f"def {fn}({', '.join([*params, 'o', 'r0', 'p', 'c0', 'q'])}):",
            f'    """Stage {stage}: rows r0..r0+p (p <= {PMAX}) and columns c0..c0+q '
            f'of batch o."""']
    kernel.helpers.append(head + block.lines)
    whole_rows = pl.col_reduce or any(pl.kinds[_src(res, op)] == ROW for op in mine)
    # every FULL value and every [p, q] broadcast is one live [p, q] fp32 tile
    tiles = sum(1 for n in tile.done if pl.kinds.get(n) == FULL) + tile.scratch + sum(
        line.count("(p, q))") for line in block.lines)
    _emit_loops(kernel, pl, fn, params, sequential=bool(mine), whole_rows=whole_rows,
                tiles=max(tiles, 1), align=tile.align)


def _accumulate(tile: TileEmitter, res: Resolved, pl: Placement, op: Op, acc: str) -> None:
    src = _src(res, op)
    if pl.kinds[src] == FULL and op.op == "rsum":
        part = fused.row_sum(tile, op, src)
    elif pl.kinds[src] == FULL:
        part = tile.names.fresh(f"{op.name}_part")
        tile.block.line(f"{part} = {REDUCE_NL[op.op]}({tile.value(src)}, axis=1, keepdims=True)")
    else:
        part = tile.value(src)
    tile.block.line(f"nisa.tensor_tensor(dst={acc}[0:p, 0:1], data1={acc}[0:p, 0:1], "
                    f"data2={part}, op={ACC_OP[op.op]})")


def _store_tile(tile: TileEmitter, kernel: Kernel, res: Resolved, pl: Placement,
                out: Output) -> str:
    kind = pl.kinds[res.target(out.name)]
    value = tile.value(out.name)
    frame = pl.frame
    view = kernel.names.fresh(f"{out.var}_v")
    cols = frame.cols if kind == FULL else 1
    kernel.hbm_views[view] = hbm_view(out.var, frame.outer, frame.rows, cols, frame)
    kernel.body.line(f"{view} = {kernel.hbm_views[view]}")
    if frame.perm and kind == FULL and frame.rows > 1 and frame.cols > 1:
        transposed_store(tile.block, value, view, "o", nl_dtype(out.dtype))
        return view
    if out.dtype != "float32" and tile.native.get(value) != nl_dtype(out.dtype) and (
            not _write_as(tile.block, value, nl_dtype(out.dtype))):
        cast = tile.names.fresh(f"{out.var}_cast")
        tile.block.line(f"{cast} = nl.copy({value}, dtype={nl_dtype(out.dtype)})")
        value = cast
    col_index = ds("c0", "q") if kind == FULL else "0:1"
    tile.block.line(f"nl.store({view}[o, {ds('r0', 'p')}, {col_index}], {value})")
    return view


def _write_as(block: Block, var: str, dtype: str) -> bool:
    """Allocate `var` in `dtype` when one instruction writes it (dst=) and nothing reads it
    but the store: the engine rounds on writing exactly as the cast copy would, so the
    copy is saved. False (nothing changed) otherwise."""
    alloc = f"{var} = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)"
    found = [i for i, line in enumerate(block.lines) if line.strip() == alloc]
    if len(found) != 1:
        return False
    uses = [line for line in block.lines[found[0] + 1:] if re.search(rf"\b{var}\b", line)]
    if len(uses) != 1 or f"dst={var}," not in uses[0]:
        return False
    block.lines[found[0]] = block.lines[found[0]].replace("nl.float32", dtype)
    return True


def _emit_loops(kernel: Kernel, pl: Placement, fn: str, params: list[str], sequential: bool,
                whole_rows: bool, tiles: int, align: int = 1) -> None:
    frame, body = pl.frame, kernel.body
    if whole_rows and tiles * frame.cols * 4 > SBUF_BUDGET:
        raise LayoutError(f"rows of {frame.cols} elements reduced whole need {tiles} live tiles "
                          f"of {frame.cols * 4} B per partition, over the SBUF budget")
    # column tile: as wide as the SBUF budget allows, a multiple of 128, at most QMAX
    fit = max(PMAX, SBUF_BUDGET // (tiles * 4) // PMAX * PMAX)
    q = frame.cols if whole_rows else min(frame.cols, QMAX, fit)
    if q % align:  # whole column groups in every tile (a segnorm's; frame.cols holds them)
        q = max(align, q // align * align)
        if q * tiles * 4 > SBUF_BUDGET:
            raise LayoutError(f"groups of {align} columns need {tiles} live tiles of "
                              f"{align * 4} B per partition, over the SBUF budget")
    loop = "sequential_range" if sequential else "affine_range"
    o = "0"
    if frame.outer > 1:
        body.line(f"for o in nl.{loop}({frame.outer}):")
        body.indent()
        o = "o"
    call = f"{fn}({', '.join(params)}, {o}, {{i0}}, {{isz}}, {{j0}}, {{jsz}})"
    emit_grid(body, [Axis("i", frame.rows, PMAX), Axis("j", frame.cols, q)], call, loop)
    if frame.outer > 1:
        body.dedent()


def _fold(kernel: Kernel, op: Op, acc: str) -> str:
    body, names = kernel.body, kernel.names
    ps, sb, tot = names.fresh(f"{acc}_ps"), names.fresh(f"{acc}_row"), names.fresh(op.name)
    body.comment(f"fold the {PMAX} partials of {op.origin}: transpose to one row, reduce")
    body.line(f"{ps} = nl.ndarray((1, {PMAX}), dtype=nl.float32, buffer=nl.psum)")
    body.line(f"nisa.nc_transpose({ps}, {acc})")
    body.line(f"{sb} = nl.ndarray((1, {PMAX}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.tensor_copy({sb}, {ps})")
    body.line(f"{tot} = {REDUCE_NL[op.op]}({sb}, axis=1, keepdims=True)")
    return tot


def _store_total(kernel: Kernel, final: TileEmitter, out: Output) -> None:
    value = final.value(out.name)
    if out.dtype != "float32":
        cast = kernel.names.fresh(f"{out.var}_cast")
        kernel.body.line(f"{cast} = nl.copy({value}, dtype={nl_dtype(out.dtype)})")
        value = cast
    kernel.body.line(f"nl.store({out.var}.reshape((1, 1))[0:1, 0:1], {value})")
