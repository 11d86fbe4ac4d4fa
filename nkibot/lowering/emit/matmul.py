"""Matmul family: C = A @ B (2-D, batched, A and/or B transposed, nn.Linear) + epilogue.

Tensor Engine facts used: `nisa.nc_matmul(dst, stationary, moving)` computes
stationary.T @ moving with the contraction dim K on the partitions of both operands
(<= 128), stationary free size (our M tile) <= 128, moving free size (our N tile) <= 512,
and accumulates over K in one fp32 PSUM tile. A's rows are M, so its tiles are
transposed on the Tensor Engine (128 x 128 at most) unless A is stored transposed.
The elementwise epilogue (bias, activation, scaling, residual) runs on the fp32 tile
copied out of PSUM before the single store.
"""

from __future__ import annotations

import math
import re

from nkibot.lowering.emit import matmulblock
from nkibot.lowering.emit.body import TileEmitter, hoisted_bytes
from nkibot.lowering.emit.builder import PMAX, Axis, Block, Names, emit_grid, nl_dtype
from nkibot.lowering.emit.matmulblock import Gemm
from nkibot.lowering.emit.rowwise import Kernel, Output, view_definition
from nkibot.lowering.frontend.ir import REDUCE, Ref
from nkibot.lowering.schedule.layout import (
    FULL,
    ROW,
    TOTAL,
    Frame,
    LayoutError,
    LeafView,
    Placement,
    Resolved,
    place,
)
from nkibot.lowering.schedule.tiling import SCORER_NAME, Candidate, choose, others
from nkibot.sim.cost.quick import SBUF_BYTES

NMAX = 512  # gemm_moving_fmax: one PSUM bank of fp32
K_OUTER_TILES = 4  # up to this many M tiles accumulate side by side (one PSUM bank each)
#: K rows a step of the K-outer form brings in (rows of 2 KiB fp32 a DMA, not 512 B)
K_OUTER_STEP = 4 * PMAX
#: K elements of a transposed B's rows one DMA brings in the A-resident form (8 KiB fp32 a
#: partition): each transfer's fixed latency is paid once per 16 blocks, not per block.
K_CHUNK = 2048
#: Transposed B blocks sharing one PSUM bank in the A-resident form (4 x 128 fp32 columns
#: = 2 KiB a partition): one PSUM-to-SBUF copy per 4 blocks, not per block.
FLIP_BLOCKS = NMAX // PMAX
PANEL_BUDGET = SBUF_BYTES * 17 // 24  # bytes per partition a resident B panel may take (of 192 KiB)


def _operand(res: Resolved, arg: object, what: str) -> LeafView:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"matmul operand {what} is computed; only inputs/parameters "
                          "(possibly transposed) are lowered")
    return res.views[res.target(arg.name)]


def _dims(view: LeafView, left: bool) -> tuple[tuple[int, ...], int, int]:
    """(batch dims, rows, cols) of the logical operand, 1-D operands made 2-D."""
    shape = view.shape
    if len(shape) == 1:
        shape = (1, shape[0]) if left else (shape[0], 1)
    return tuple(shape[:-2]), shape[-2], shape[-1]


def _hbm_view(view: LeafView, batch: int, rows: int, cols: int) -> str:
    # stored layout: transposed operands keep their original (cols, rows) order
    stored = (cols, rows) if view.transposed else (rows, cols)
    return f"{view.leaf.name}.reshape(({batch}, {stored[0]}, {stored[1]}))"


def _grouping(a: LeafView, a_batch: tuple[int, ...], b_batch: tuple[int, ...],
              out_batch: tuple[int, ...], m: int) -> tuple[int, int, int, int]:
    """(batch loop count, A's batch count, B's batch count, rows per batch)."""
    if not b_batch and not a.transposed:
        # B is shared: fold A's batch dims into its rows, one big M
        return 1, 1, 1, math.prod(a_batch) * m
    if a_batch not in (out_batch, ()) or b_batch not in (out_batch, ()):
        raise LayoutError("broadcast batch dims in a matmul")
    groups = math.prod(out_batch)
    return groups, (groups if a_batch else 1), (groups if b_batch else 1), m


def emit_matmul(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    mms = [op for op in res.ops if op.op == "matmul"]
    if len(mms) != 1:
        raise LayoutError(f"{len(mms)} matmuls in one graph; one (plus an epilogue) is lowered")
    mm = mms[0]
    if len(outputs) != 1:
        raise LayoutError("a matmul graph with several outputs")
    a, b = _operand(res, mm.args[0], "A"), _operand(res, mm.args[1], "B")
    a_batch, m, k = _dims(a, True)
    b_batch, k2, n = _dims(b, False)
    if k != k2:
        raise LayoutError("contraction sizes differ")
    out_shape = mm.shape if len(mm.shape) >= 2 else (math.prod(mm.shape[:-1] or (1,)), n)
    frame = Frame(tuple(out_shape) if len(mm.shape) >= 2 else (m, n), 0, 1)
    frame = Frame(frame.shape, 0, len(frame.shape) - 1)
    pl = place(res, frame, [o.name for o in outputs], seed={mm.name: FULL})
    row_reduced = _row_reductions(res, pl, n)
    groups, ga, gb, rows = _grouping(a, a_batch, b_batch, tuple(mm.shape[:-2]), m)
    if frame.rows != groups * rows:
        raise LayoutError("matmul output layout")
    compute, out_dtype = "nl.float32", outputs[0].dtype
    if a.leaf.dtype == b.leaf.dtype and a.leaf.dtype in ("bfloat16", "float16"):
        compute = nl_dtype(a.leaf.dtype)
    a_v, b_v = kernel.names.fresh(f"{a.leaf.name}_mm"), kernel.names.fresh(f"{b.leaf.name}_mm")
    kernel.body.line(f"{a_v} = {_hbm_view(a, ga, rows, k)}")
    kernel.body.line(f"{b_v} = {_hbm_view(b, gb, k, n)}")
    itemsize = 2 if compute != "nl.float32" else 4
    forced = kernel.choices.get("matmul")
    gemm = Gemm(rows, k, n, a.transposed, b.transposed, itemsize,
                2 if out_dtype in ("bfloat16", "float16") else 4)
    held = hoisted_bytes(res, pl)  # the epilogue's rows, resident whichever form runs
    if not row_reduced and _emit_blocked(kernel, res, (pl, mm.name, outputs[0]), gemm, held,
                                         compute, (a_v, b_v, groups, ga > 1, gb > 1)):
        return
    if row_reduced and b.transposed and n > PMAX:
        forced = "b-panel"  # a streamed transposed B gives 128-column tiles: too narrow
    candidates = _tiling(a, b, groups * rows, k, n, itemsize, single=groups == 1,
                         k_outer=-(-rows // PMAX) <= K_OUTER_TILES)
    plan = choose(candidates, PANEL_BUDGET - held, forced=forced)
    if row_reduced and b.transposed and n > PMAX and plan.name != "b-panel":
        raise LayoutError(f"row reductions after a matmul: B's [K, {n}] panel exceeds SBUF")
    # a streamed transposed B is transposed 128 columns at a time; the panel takes 512
    n_tile = PMAX if b.transposed and plan.name in ("stream", "a-resident") else NMAX
    if not row_reduced:
        kernel.alternatives += [("matmul", name)
                                for name in others(candidates, PANEL_BUDGET - held, plan)]
    why = ("a variant, kept only if it verifies and is faster by the cost model"
           if forced == plan.name else f"chosen by {SCORER_NAME}")
    kernel.body.comment(f"tiling: {plan.name} ({why})")
    panel = plan.name == "b-panel"
    resident = plan.name == "a-resident"
    k_outer = panel and -(-rows // PMAX) <= K_OUTER_TILES
    block_fn = _emit_block_helper(kernel, a, b, compute, panel, resident)
    tile_fn, store_fn, params, _ = _emit_tile_helper(kernel, res, pl, mm.name, outputs[0], block_fn,
                                                  k, rows, (ga > 1, gb > 1), k_outer,
                                                  K_CHUNK if resident and b.transposed else PMAX,
                                                  n_tile, panel)
    body = kernel.body
    if panel:
        load_fn = _emit_panel_loader(kernel, b, compute)
        if k_outer:
            panel_fn = _emit_k_outer(kernel, (k, rows, compute), (block_fn, load_fn, store_fn),
                                     params, (ga > 1, gb > 1))
        else:
            panel_fn = _emit_panel_helper(kernel, load_fn, k, rows, compute, tile_fn, params,
                                          gb > 1)
        call = f"{panel_fn}({', '.join([a_v, b_v, *params])}, {{g0}}, {{n0}}, {{nsz}})"
        emit_grid(body, [Axis("g", groups, 1), Axis("n", n, n_tile)], call, "affine_range")
        return
    if resident:
        a_sb = kernel.names.fresh("a_sb")
        _emit_a_resident(kernel, a, (a_v, a_sb), (k, rows), compute)
        a_v = a_sb
    call = f"{tile_fn}({', '.join([a_v, b_v, *params])}, {{g0}}, {{m0}}, {{msz}}, {{n0}}, {{nsz}})"
    emit_grid(body, [Axis("g", groups, 1), Axis("m", rows, PMAX), Axis("n", n, n_tile)], call,
              "affine_range")


def _row_reductions(res: Resolved, pl: Placement, n: int) -> bool:
    """Whether the epilogue reduces output rows (softmax, logsumexp, a row sum): it may
    while one output tile holds the whole row (N <= 512, one PSUM bank)."""
    if TOTAL in pl.kinds.values():
        raise LayoutError("whole-tensor reductions after a matmul are not lowered")
    reduces = [op for op in res.ops if op.op in REDUCE]
    if any(pl.kinds[op.name] != ROW for op in reduces):
        raise LayoutError("reductions after a matmul over other dims than its output rows")
    if reduces and n > NMAX:
        raise LayoutError(f"row reductions after a matmul whose rows ({n} columns) exceed one "
                          f"{NMAX}-column output tile")
    return bool(reduces)


def _emit_blocked(kernel: Kernel, res: Resolved, out: tuple[Placement, str, Output], gemm: Gemm,
                  held: int, compute: str, views: tuple[str, str, int, bool, bool]) -> bool:
    """The blocked form (matmulblock.py) when its blocks fit SBUF beside the `held` bytes
    per partition and no other tiling is forced: the best block sizes by its modelled
    time; the next best and the old panel or stream form (the traffic proxy's pick) become
    variants for the optimize phase."""
    forced = kernel.choices.get("matmul")
    blocked = matmulblock.candidates(gemm, held)
    pick = [c for c in blocked if c.name == forced] or blocked[:1]
    if not pick or (forced is not None and not forced.startswith("blocked")):
        return False
    a_v, b_v, groups, batched_a, batched_b = views
    kernel.alternatives += [("matmul", c.name) for c in blocked[:2] if c != pick[0]][:1]
    kernel.alternatives.append(("matmul", "b-panel"))
    pl, mm_name, output = out
    _, store_fn, params, plain = _emit_tile_helper(kernel, res, pl, mm_name, output, "",
                                                   gemm.k, gemm.rows, (batched_a, batched_b),
                                                   True)
    if plain:  # the blocked form evicts into whole output rows itself
        kernel.helpers = [h for h in kernel.helpers if not h[0].startswith(f"def {store_fn}(")]
    if forced == pick[0].name:
        kernel.body.comment("a variant, kept only if it verifies and is faster by the cost model")
    matmulblock.emit_blocked(kernel, gemm, pick[0], compute, (a_v, b_v, params),
                             (groups, batched_a, batched_b), (store_fn, output.dtype, plain))
    return True


def _tiling(a: LeafView, b: LeafView, m: int, k: int, n: int,
            itemsize: int, single: bool = False, k_outer: bool = False) -> list[Candidate]:
    """Stream both operands per output tile, or keep B's [K, 512] panel resident (a
    transposed B is transposed once into it, 128 columns at a time, so A's blocks are
    transposed once per 512 output columns, not once per 128), or, when A is one row tile
    of one batch group (a GEMV-like linear: 128 rows against a wide weight), keep all of A
    resident, transposed once, and stream B alone."""
    a_bytes, b_bytes = m * k * itemsize, k * n * itemsize
    m_tiles, k_tiles = -(-m // PMAX), -(-k // PMAX)
    b_blocks = k_tiles * -(-n // PMAX) if b.transposed else 0
    out: list[Candidate] = []
    for name, n_tile in (("stream", PMAX if b.transposed else NMAX), ("b-panel", NMAX)):
        n_tiles = -(-n // n_tile)
        a_transposes = 0 if a.transposed else m_tiles * k_tiles * n_tiles
        if name == "stream":
            out.append(Candidate(name, a_bytes * n_tiles + b_bytes * m_tiles,
                                 a_transposes + b_blocks * m_tiles, 3 * NMAX * 4))
        else:  # the K-outer form (few row tiles) holds one K step of the panel, two in flight
            held = 2 * K_OUTER_STEP // PMAX if k_outer else k_tiles
            out.append(Candidate(name, a_bytes * n_tiles + b_bytes, a_transposes + b_blocks,
                                 held * min(n, n_tile) * itemsize + 2 * NMAX * 4))
    if single and m <= PMAX:
        out.append(Candidate("a-resident", a_bytes + b_bytes,
                             (0 if a.transposed else k_tiles) + b_blocks,
                             k_tiles * m * itemsize + 3 * NMAX * 4))
    return out


def _emit_a_resident(kernel: Kernel, a: LeafView, names: tuple[str, str],
                     sizes: tuple[int, int], compute: str) -> None:
    """A's [K, rows] stationary blocks (rows <= 128), loaded and transposed once into an
    SBUF tile [128, K tiles, rows] every output tile reads."""
    a_v, a_sb = names
    k, rows = sizes
    fn = kernel.names.fresh("a_resident_block")
    blk = Block(depth=1)
    if a.transposed:
        blk.line(f"nisa.dma_copy(dst=a_sb[0:ksz, k0 // {PMAX}, 0:{rows}], "
                 f"src=a_v[0, nl.ds(k0, ksz), 0:{rows}])")
    else:
        blk.line(f"a_blk = nl.load(a_v[0, 0:{rows}, nl.ds(k0, ksz)], dtype={compute})")
        blk.line(f"a_ps = nl.ndarray((ksz, {rows}), dtype={compute}, buffer=nl.psum)")
        blk.line("nisa.nc_transpose(a_ps, a_blk)")
        blk.line(f"nisa.tensor_copy(a_sb[0:ksz, k0 // {PMAX}, 0:{rows}], a_ps)")
    kernel.helpers.append([f"def {fn}(a_sb, a_v, k0, ksz):",
                           '    """K block k0..k0+ksz of A, as the stationary operand."""',
                           *blk.lines])
    body = kernel.body
    body.comment(f"A ({rows} rows) resident: its K blocks transposed once, for every output tile")
    body.line(f"{a_sb} = nl.ndarray(({PMAX}, {-(-k // PMAX)}, {rows}), dtype={compute}, "
              "buffer=nl.sbuf)")
    emit_grid(body, [Axis("k", k, PMAX)], f"{fn}({a_sb}, {a_v}, {{k0}}, {{ksz}})",
              "affine_range")


def _emit_panel_helper(kernel: Kernel, load_fn: str, k: int, rows: int, compute: str,
                       tile_fn: str, params: list[str], batched_b: bool) -> str:
    """Columns c0..c0+q: B's [K, q] panel loaded (and transposed) once for every M tile."""
    fn = kernel.names.fresh("matmul_panel")
    blk = Block(depth=1)
    gb = "g" if batched_b else "0"
    k_tiles = -(-k // PMAX)
    blk.line(f"b_sb = nl.ndarray(({PMAX}, {k_tiles}, q), dtype={compute}, buffer=nl.sbuf)")
    emit_grid(blk, [Axis("k", k, PMAX)],
              f"{load_fn}(b_sb, b_v, {gb}, c0, q, {{k0}}, {{ksz}}, {{k0}} // {PMAX})",
              "affine_range")
    blk.comment("every M tile reuses the resident panel")
    emit_grid(blk, [Axis("m", rows, PMAX)],
              f"{tile_fn}(a_v, b_sb, {', '.join(params)}, g, {{m0}}, {{msz}}, c0, q)",
              "affine_range")
    kernel.helpers.append([f"def {fn}(a_v, b_v, {', '.join(params)}, g, c0, q):",
                           '    """Output columns c0..c0+q: load B\'s panel once, then every '
                           'row tile."""', *blk.lines])
    return fn


def _emit_panel_loader(kernel: Kernel, b: LeafView, compute: str) -> str:
    """The helper that loads (and transposes) one K block of B's panel."""
    load_fn = kernel.names.fresh("panel_block")
    lb = Block(depth=1)
    if b.transposed:
        lb.comment("B is stored transposed ([N, K]): transpose its blocks once, into the panel, "
                   f"{PMAX} columns at a time (rows of ksz elements a DMA)")
        lb.line(f"for j0 in range(0, q, {PMAX}):")
        lb.line(f"    w = min({PMAX}, q - j0)")
        lb.line(f"    b_blk = nl.load(b_v[gb, nl.ds(c0 + j0, w), nl.ds(k0, ksz)], dtype={compute})")
        lb.line(f"    for u in range((ksz + {PMAX - 1}) // {PMAX}):")
        lb.line(f"        h = min({PMAX}, ksz - u * {PMAX})")
        lb.line(f"        b_ps = nl.ndarray((h, w), dtype={compute}, buffer=nl.psum)")
        lb.line(f"        nisa.nc_transpose(b_ps, b_blk[0:w, nl.ds(u * {PMAX}, h)])")
        lb.line("        nisa.tensor_copy(b_sb[0:h, kt + u, nl.ds(j0, w)], b_ps)")
    else:
        lb.line(f"for u in range((ksz + {PMAX - 1}) // {PMAX}):")
        lb.line(f"    h = min({PMAX}, ksz - u * {PMAX})")
        lb.line("    nisa.dma_copy(dst=b_sb[0:h, kt + u, 0:q], "
                f"src=b_v[gb, nl.ds(k0 + u * {PMAX}, h), nl.ds(c0, q)])")
    kernel.helpers.append(["def " + load_fn + "(b_sb, b_v, gb, c0, q, k0, ksz, kt):",
                           '    """K rows k0..k0+ksz of B\'s panel at columns c0..c0+q, into '
                           'its K tiles kt.."""',
                           *lb.lines])
    return load_fn


def _emit_k_outer(kernel: Kernel, sizes: tuple[int, int, str], fns: tuple[str, str, str],
                  params: list[str], batched: tuple[bool, bool]) -> str:
    """Few M tiles: the K loop outside, every M tile's PSUM accumulator live, so each
    panel block feeds the PE as soon as it lands (loads overlap the matmuls). Every row
    tile reads a K block as soon as it is loaded, so no step keeps it: each step loads its
    own [K block, q] tile, and the form's SBUF does not grow with K (level 2 28, K = 8192:
    a whole [K, 512] panel did not fit, and the streamed form loaded B and A 4 and 32
    times over)."""
    k, rows, compute = sizes
    block_fn, load_fn, store = fns
    fn, step_fn = kernel.names.fresh("matmul_kouter"), kernel.names.fresh("matmul_kstep")
    ga, gb = ("g" if batched[0] else "0"), ("g" if batched[1] else "0")
    tiles = [(m0, min(PMAX, rows - m0)) for m0 in range(0, rows, PMAX)]
    accs = ", ".join(f"acc{j}" for j in range(len(tiles)))
    blk = Block(depth=1)
    for j, (_m0, p) in enumerate(tiles):
        blk.line(f"acc{j} = nl.ndarray(({p}, q), dtype=nl.float32, buffer=nl.psum)")
    emit_grid(blk, [Axis("k", k, K_OUTER_STEP)],
              f"{step_fn}(a_v, b_v, {accs}, g, c0, q, {{k0}}, {{ksz}})", "affine_range")
    for j, (m0, p) in enumerate(tiles):
        blk.line(f"{store}(acc{j}, {', '.join(params)}, g, {m0}, {p}, c0, q)")
    kernel.helpers.append([f"def {fn}(a_v, b_v, {', '.join(params)}, g, c0, q):",
                           f'    """Output columns c0..c0+q, all {len(tiles)} row tiles at once: '
                           'K blocks outside."""', *blk.lines])
    sb = Block(depth=1)
    sb.line(f"b_sb = nl.ndarray(({PMAX}, {K_OUTER_STEP // PMAX}, q), dtype={compute}, "
            "buffer=nl.sbuf)")
    sb.line(f"{load_fn}(b_sb, b_v, {gb}, c0, q, k0, ksz, 0)")
    for j, (m0, p) in enumerate(tiles):
        sb.line(f"{block_fn}(acc{j}, a_v, b_sb, {ga}, {gb}, {m0}, {p}, c0, q, k0, ksz, 0)")
    kernel.helpers.append([f"def {step_fn}(a_v, b_v, {accs}, g, c0, q, k0, ksz):",
                           '    """K block k0..k0+ksz: its panel block, then every row tile\'s '
                           'matmul."""', *sb.lines])
    return fn


def _emit_block_helper(kernel: Kernel, a: LeafView, b: LeafView, compute: str,
                       panel: bool = False, resident: bool = False) -> str:
    fn = kernel.names.fresh("matmul_block")
    blk = Block(depth=1)
    if resident and b.transposed:
        flip_fn = _emit_flip_helper(kernel, compute)
        blk.comment(f"B's rows [q, ksz] in one DMA (ksz <= {K_CHUNK}: few large transfers), "
                    f"transposed {FLIP_BLOCKS} blocks of {PMAX} columns to a PSUM bank; A's "
                    "blocks from its resident tile")
        blk.line(f"b_blk = nl.load(b_v[gb, nl.ds(c0, q), nl.ds(k0, ksz)], dtype={compute})")
        blk.comment(f"groups (column, rows, blocks): whole blocks {FLIP_BLOCKS} at a time, then "
                    "a ragged last block alone")
        blk.line(f"full = ksz // {PMAX}")
        blk.line(f"groups = [(j, {PMAX}, min({FLIP_BLOCKS}, full - j // {PMAX})) "
                 f"for j in range(0, full * {PMAX}, {FLIP_BLOCKS * PMAX})]")
        blk.line(f"groups += [(full * {PMAX}, ksz - full * {PMAX}, 1)] if ksz % {PMAX} else []")
        blk.comment("software-pipelined: the PE transposes group i + 1 while the Vector Engine "
                    "copies group i out of PSUM, so no matmul waits on the copy just before it")
        blk.line(f"nxt = {flip_fn}(b_blk, q, *groups[0])")
        blk.line("for i, (j0, w, nb) in enumerate(groups):")
        blk.indent()
        blk.line("b_t = nxt")
        blk.line("if i + 1 < len(groups):")
        blk.line(f"    nxt = {flip_fn}(b_blk, q, *groups[i + 1])")
        blk.line("for u in range(nb):")
        blk.line(f"    nisa.nc_matmul(acc, a_v[0:w, (k0 + j0) // {PMAX} + u, nl.ds(m0, p)], "
                 "b_t[0:w, nl.ds(u * q, q)])")
        blk.dedent()
        kernel.helpers.append([
            f"def {fn}(acc, a_v, b_v, ga, gb, m0, p, c0, q, k0, ksz):",
            '    """K rows k0..k0+ksz of the [p, q] output tile at rows m0, columns c0."""',
            *blk.lines])
        return fn
    if panel:
        _panel_block(blk, a, compute)
        kernel.helpers.append([
            f"def {fn}(acc, a_v, b_v, ga, gb, m0, p, c0, q, k0, ksz, kt):",
            '    """K rows k0..k0+ksz (K tiles kt.. of the panel b_v) of the [p, q] output '
            'tile at rows m0, columns c0."""', *blk.lines])
        return fn
    if resident:
        blk.comment("A's block comes from the resident tile (a_v is A's [K, rows] tile here)")
        blk.line(f"a_t = a_v[0:ksz, k0 // {PMAX}, nl.ds(m0, p)]")
    elif a.transposed:
        blk.comment("A is stored transposed: its [K, M] block is already the stationary operand")
        blk.line("a_t = nl.load(a_v[ga, nl.ds(k0, ksz), nl.ds(m0, p)], "
                 f"dtype={compute})")
    else:
        blk.comment("stationary operand: A block [p, ksz] transposed to [ksz, p] on the PE")
        blk.line(f"a_blk = nl.load(a_v[ga, nl.ds(m0, p), nl.ds(k0, ksz)], dtype={compute})")
        _transpose(blk, "a_blk", "a_t", "ksz", "p", compute)
    if b.transposed:
        blk.comment("B is stored transposed ([N, K], e.g. an nn.Linear weight): transpose it")
        blk.line(f"b_blk = nl.load(b_v[gb, nl.ds(c0, q), nl.ds(k0, ksz)], dtype={compute})")
        _transpose(blk, "b_blk", "b_t", "ksz", "q", compute)
    else:
        blk.line(f"b_t = nl.load(b_v[gb, nl.ds(k0, ksz), nl.ds(c0, q)], dtype={compute})")
    blk.comment("acc[p, q] += a_t.T @ b_t (accumulates in PSUM over the K blocks)")
    blk.line("nisa.nc_matmul(acc, a_t, b_t)")
    kernel.helpers.append([
        f"def {fn}(acc, a_v, b_v, ga, gb, m0, p, c0, q, k0, ksz):",
        '    """One K block (ksz <= 128) of the [p, q] output tile at rows m0, columns c0."""',
        *blk.lines,
    ])
    return fn


#: instructions that may read the PSUM tile: the Vector and Scalar Engines' (nl arithmetic
#: runs on the Vector Engine); not a DMA, a matmul or the GpSimd engine, which has no
#: PSUM port (memory-hierarchy-overview.rst)
_PSUM_READERS = re.compile(r"\s*(\w+ = nl\.(?!load|store)\w+\(|nisa\.(activation|tensor_scalar|"
                           r"tensor_tensor|scalar_tensor_tensor|bn_stats)\()")


def _read_psum_once(blk: Block) -> None:
    """The eviction copy dropped where one instruction is its only reader: that instruction
    reads the PSUM tile itself (the Vector and Scalar Engines both read PSUM), one Vector
    pass a tile saved."""
    pad = "    " * blk.depth
    alloc = f"{pad}res = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)"
    copy = f"{pad}nisa.tensor_copy(res, acc)"
    readers = [i for i, line in enumerate(blk.lines)
               if re.search(r"\bres\b", line) and line not in (alloc, copy)]
    if len(readers) != 1 or alloc not in blk.lines or copy not in blk.lines:
        return
    line = blk.lines[readers[0]]
    if not _PSUM_READERS.match(line) or "gpsimd" in line or "dst=res" in line:
        return
    blk.lines[readers[0]] = re.sub(r"\bres\b", "acc", line)
    blk.lines.remove(alloc)
    blk.lines.remove(copy)


def _emit_flip_helper(kernel: Kernel, compute: str) -> str:
    """The helper that transposes `nb` blocks of a B row tile into one PSUM bank and copies
    them out with one Vector Engine instruction (a transposed B in the A-resident form)."""
    fn = kernel.names.fresh("matmul_flip")
    kernel.helpers.append([
        f"def {fn}(b_blk, q, j0, w, nb):",
        '    """Columns j0..j0 + nb * w of B\'s [q, ksz] rows as nb transposed [w, q] blocks side '
        'by side: [w, nb * q] in SBUF."""',
        f"    b_ps = nl.ndarray((w, nb * q), dtype={compute}, buffer=nl.psum)",
        "    for u in range(nb):",
        "        nisa.nc_transpose(b_ps[0:w, nl.ds(u * q, q)], b_blk[0:q, nl.ds(j0 + u * w, w)])",
        f"    b_t = nl.ndarray((w, nb * q), dtype={compute}, buffer=nl.sbuf)",
        "    nisa.tensor_copy(b_t, b_ps)",
        "    return b_t"])
    return fn


def _panel_block(blk: Block, a: LeafView, compute: str) -> None:
    """A's [p, ksz] rows (one DMA; ksz a K step, up to K_OUTER_STEP) against the panel's K
    tiles, one 128-row block a matmul."""
    if not a.transposed:
        blk.comment("stationary operand: A's rows [p, ksz] in one DMA, each 128-column block "
                    "transposed to [128, p] on the PE")
        blk.line(f"a_blk = nl.load(a_v[ga, nl.ds(m0, p), nl.ds(k0, ksz)], dtype={compute})")
    else:
        blk.comment("A is stored transposed: its [K, M] blocks are already the stationary operand")
    blk.line(f"for u in range((ksz + {PMAX - 1}) // {PMAX}):")
    blk.indent()
    blk.line(f"h = min({PMAX}, ksz - u * {PMAX})")
    if a.transposed:
        blk.line(f"a_t = nl.load(a_v[ga, nl.ds(k0 + u * {PMAX}, h), nl.ds(m0, p)], "
                 f"dtype={compute})")
    else:
        _transpose(blk, f"a_blk[0:p, nl.ds(u * {PMAX}, h)]", "a_t", "h", "p", compute)
    blk.comment("acc[p, q] += a_t.T @ b_t (accumulates in PSUM over the K blocks)")
    blk.line("nisa.nc_matmul(acc, a_t, b_v[0:h, kt + u, 0:q])")
    blk.dedent()


def _transpose(blk: Block, src: str, dst: str, rows: str, cols: str, dtype: str) -> None:
    blk.line(f"{dst}_ps = nl.ndarray(({rows}, {cols}), dtype={dtype}, buffer=nl.psum)")
    blk.line(f"nisa.nc_transpose({dst}_ps, {src})")
    blk.line(f"{dst} = nl.ndarray(({rows}, {cols}), dtype={dtype}, buffer=nl.sbuf)")
    blk.line(f"nisa.tensor_copy({dst}, {dst}_ps)")


def _emit_tile_helper(kernel: Kernel, res: Resolved, pl: object, mm: str, out: Output,
                      block_fn: str, k: int, rows: int,
                      batched: tuple[bool, bool], k_outer: bool, k_step: int = PMAX,
                      n_tile: int = NMAX, panel: bool = False
                      ) -> tuple[str, str, list[str], bool]:
    fn = kernel.names.fresh("matmul_tile")
    store_fn = kernel.names.fresh("matmul_store")
    ga, gb = ("g" if batched[0] else "0"), ("g" if batched[1] else "0")
    tb = Block(depth=1)
    tb.line("acc = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.psum)")
    kt = f", {{k0}} // {PMAX}" if panel else ""
    call = f"{block_fn}(acc, a_v, b_v, {ga}, {gb}, m0, p, c0, q, {{k0}}, {{ksz}}{kt})"
    emit_grid(tb, [Axis("k", k, k_step)], call, "affine_range")
    blk = Block(depth=1)
    blk.line(f"r0 = g * {rows} + m0")
    blk.line("res = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_copy(res, acc)")
    names = Names(set(kernel.names.taken) | {"acc", "res", "r0", "p", "q", "c0", "o", "g"})
    tile = TileEmitter(res, pl, blk, names, seed={mm: "res"},  # type: ignore[arg-type]
                       views=kernel.leaf_views, hoist=kernel.body, aligned_tiles=True)
    value = tile.value(out.name)
    # output tiles start at multiples of n_tile (the last may be short): whole groups of a
    # segnorm's columns in each only when the group divides both the tile and the row
    if n_tile % tile.align or pl.frame.cols % tile.align:  # type: ignore[attr-defined]
        raise LayoutError(f"groups of {tile.align} columns straddle the matmul's "
                          f"{n_tile}-column output tiles")
    if value == "res" and out.dtype != "float32":
        # no epilogue: the PSUM copy writes the output dtype itself (one copy, not two)
        blk.lines[blk.lines.index("    res = nl.ndarray((p, q), dtype=nl.float32, "
                                  "buffer=nl.sbuf)")] = (
            f"    res = nl.ndarray((p, q), dtype={nl_dtype(out.dtype)}, buffer=nl.sbuf)")
    elif out.dtype != "float32":
        blk.line(f"out_cast = nl.copy({value}, dtype={nl_dtype(out.dtype)})")
        value = "out_cast"
    else:
        _read_psum_once(blk)
    row_out = pl.kinds[res.target(out.name)] == ROW  # type: ignore[attr-defined]
    cols = "0:1" if row_out else "nl.ds(c0, q)"  # a row reduction: one value per row
    blk.line(f"nl.store(out_v[0, nl.ds(r0, p), {cols}], {value})")
    kernel.names.taken |= names.taken
    for name, param in tile.views.items():
        if param not in kernel.hbm_views:
            kernel.hbm_views[param] = view_definition(res, pl, name)  # type: ignore[arg-type]
            kernel.body.line(f"{param} = {kernel.hbm_views[param]}")
    frame = pl.frame  # type: ignore[attr-defined]
    kernel.body.line(f"out_v = {out.var}.reshape((1, {frame.rows}, "
                     f"{1 if row_out else frame.cols}))")
    params = [*tile.used_views, *tile.used_totals, "out_v"]  # totals: tiles built once
    kernel.helpers.append([
        f"def {store_fn}(acc, {', '.join(params)}, g, m0, p, c0, q):",
        '    """Output tile [p, q] at rows m0, columns c0 of batch g: PSUM out, epilogue, '
        'store."""', *blk.lines])
    tb.line(f"{store_fn}(acc, {', '.join(params)}, g, m0, p, c0, q)")
    if k_outer:  # the K-outer form calls the store helper itself; no per-tile K loop
        return fn, store_fn, params, value == "res"
    kernel.helpers.append([
        f"def {fn}(a_v, b_v, {', '.join(params)}, g, m0, p, c0, q):",
        '    """Output tile [p, q] at rows m0, columns c0 of batch g: K loop, then epilogue."""',
        *tb.lines,
    ])
    return fn, store_fn, params, value == "res"
