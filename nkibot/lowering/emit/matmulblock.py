"""The blocked GEMM: resident operand blocks, large DMAs, K accumulating in PSUM.

The form of AWS's optimised matmul tutorial. Both operands are kept in SBUF in the layout
the Tensor Engine reads, contraction dim on the partitions: A's block as [128, KT, BM]
(the stationary side, BM rows of A) and B's panel as [128, KT, BN] (the moving side, BN
columns of B). Each is loaded with one DMA per K tile of up to 128 rows (runs of BM or BN
elements), or, when stored the other way round, one DMA per 128 rows (runs of K
elements) and a PE transpose per 128 x 128 block, done once per load. Every output tile
[128, 512] then accumulates its K tiles in one PSUM bank from the resident blocks, so a
loaded tile serves every tile of the other operand's block. Loop order: N blocks outside,
M blocks inside; when one M block covers all of A it is loaded once per batch group,
outside the N loop.

`choose_blocks` picks (BM, BN) by a modelled time from the cost model's trn1 figures
(`convfold.pe_ns`, `load_ns`, and its per-run DMA cost): the Tensor Engine's matmuls and
transposes, against the DMA bytes at the efficiency of their runs, plus the first blocks'
load, which nothing overlaps. The other block sizes that fit are variants the optimize
phase times with the cost model for the kernel's actual generation.
"""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel
from nkibot.lowering.schedule.convfold import load_ns, pe_ns
from nkibot.sim.cost import constants as C
from nkibot.sim.cost.quick import SBUF_BYTES

NMAX = 512  # gemm_moving_fmax: one PSUM bank of fp32
# the cost model's 15 ns a run, at one queue's 17 B/ns (trn1)
DESCRIPTOR_BYTES = C.DMA_DESCRIPTOR_NS.value * C.TRN1.dma_queue_bw
#: SBUF bytes per partition the two resident blocks may take (of 192 KiB): the rest
#: holds the output tiles and lets the next blocks load while these are used.
BLOCK_BUDGET = SBUF_BYTES // 2
#: SBUF bytes per partition everything the blocked form keeps live at its peak may take
#: (`live_bytes`): the rest (a quarter) holds output tiles, broadcast bias rows and what
#: earlier stages of the kernel keep.
LIVE_BUDGET = SBUF_BYTES * 3 // 4


@dataclass(frozen=True)
class Gemm:
    """One batch group's GEMM: [rows, k] @ [k, n], operand orientations, element bytes."""

    rows: int
    k: int
    n: int
    a_transposed: bool  # A stored [K, M]: its blocks load straight into the stationary side
    b_transposed: bool  # B stored [N, K] (an nn.Linear weight): its blocks are transposed
    itemsize: int
    out_itemsize: int


@dataclass(frozen=True)
class Blocks:
    """Block sizes (multiples of the tile sizes, or the whole dim) and their modelled ns."""

    bm: int
    bn: int
    ns: float

    @property
    def name(self) -> str:
        return f"blocked {self.bm}x{self.bn}"


def _tiles(extent: int, tile: int) -> int:
    return -(-extent // tile)


def _efficiency(run_bytes: int) -> float:
    """The cost model's DMA efficiency for contiguous runs of `run_bytes`."""
    return run_bytes / (run_bytes + DESCRIPTOR_BYTES)


def modelled_ns(g: Gemm, bm: int, bn: int) -> float:
    """Modelled ns of one group: max(PE, DMA) plus the first blocks' load."""
    m_blocks, n_blocks = _tiles(g.rows, bm), _tiles(g.n, bn)
    kt, item = _tiles(g.k, PMAX), g.itemsize
    a_loads = 1 if m_blocks == 1 else n_blocks  # a single M block stays resident
    b_loads = 1  # each panel is loaded once, N blocks outside
    mm = _tiles(g.rows, PMAX) * kt * sum(max(min(NMAX, g.n - c), 64)
                                        for c in range(0, g.n, NMAX))
    a_tr = 0 if g.a_transposed else a_loads * _tiles(g.rows, PMAX) * kt * PMAX
    b_tr = g.b_transposed * b_loads * _tiles(g.n, PMAX) * kt * PMAX
    pe = pe_ns(mm + a_tr + b_tr, item)
    a_run = (g.k if not g.a_transposed else min(bm, g.rows)) * item
    b_run = (g.k if g.b_transposed else min(bn, g.n)) * item
    out_run = min(NMAX, g.n) * g.out_itemsize
    a_bytes, b_bytes = g.rows * g.k * item, g.k * g.n * item
    dma = load_ns(a_loads * a_bytes / _efficiency(a_run) + b_loads * b_bytes / _efficiency(b_run)
                  + g.rows * g.n * g.out_itemsize / _efficiency(out_run))
    # the first matmuls wait for one K tile of each block (they load interleaved), or for
    # 128 whole rows of an operand stored [*, K]
    first = sum((w * PMAX if direct else min(w, PMAX) * g.k) * item
                for w, direct in ((min(bm, g.rows), g.a_transposed),
                                  (min(bn, g.n), not g.b_transposed)))
    # loads and stores share the queues, and a transfer waiting behind another delays its
    # consumer: about an eighth of the DMA time shows on top (fit to the cost model's
    # times of the tutorial's shapes, where fewer, longer runs won by 2-3 %)
    return max(pe, dma) + load_ns(first) + dma / 8


def block_bytes(g: Gemm, bm: int, bn: int) -> int:
    """SBUF bytes per partition of A's block and B's panel."""
    return _tiles(g.k, PMAX) * (min(bm, g.rows) + min(bn, g.n)) * g.itemsize


def live_bytes(g: Gemm, bm: int, bn: int) -> int:
    """SBUF bytes per partition the blocked form holds at its peak: B's panel; A's first
    block, still held by the panel while each further M block loads (two when M has
    several blocks); and, for an operand stored [*, K] (loaded as whole rows and
    transposed on the PE), two [128, K] row tiles in flight."""
    a_copies = 1 if bm >= g.rows else 2
    staged = (not g.a_transposed) or g.b_transposed
    return (_tiles(g.k, PMAX) * (a_copies * min(bm, g.rows) + min(bn, g.n))
            + (2 * g.k if staged else 0)) * g.itemsize


def candidates(g: Gemm, held: int = 0) -> list[Blocks]:
    """Every (BM, BN) that fits BLOCK_BUDGET, and whose peak (`live_bytes`) fits
    LIVE_BUDGET less `held`, the bytes per partition the kernel keeps for its whole run
    (its epilogue's parameter rows broadcast once), best (lowest modelled ns) first."""
    bms = sorted({min(g.rows, PMAX * 2 ** i) for i in range(6)})
    bns = sorted({min(g.n, NMAX * 2 ** i) for i in range(4)})
    found = [Blocks(bm, bn, modelled_ns(g, bm, bn)) for bm in bms for bn in bns
             if block_bytes(g, bm, bn) <= BLOCK_BUDGET
             and live_bytes(g, bm, bn) + held <= LIVE_BUDGET]
    return sorted(found, key=lambda b: (b.ns, -b.bm, -b.bn))


def emit_blocked(kernel: Kernel, g: Gemm, blocks: Blocks, compute: str,
                 views: tuple[str, str, list[str]], groups: tuple[int, bool, bool],
                 store: tuple[str, str, bool]) -> None:
    """The kernel body and helpers of the blocked form (see the module docstring)."""
    a_v, b_v, params = views
    count, batched_a, batched_b = groups
    ga, gb = ("g" if batched_a else "0"), ("g" if batched_b else "0")
    fns = _Fns(kernel, g, compute, store, params)
    body = kernel.body
    body.comment(f"{blocks.name}: A's [K, {min(blocks.bm, g.rows)}] block and B's "
                 f"[K, {min(blocks.bn, g.n)}] panel resident in SBUF (chosen by the modelled "
                 "time of the cost model's figures)")
    body.line(f"for g in nl.affine_range({count}):" if count > 1 else "g = 0")
    inner = Block(depth=body.depth + (1 if count > 1 else 0))
    ps = ", ".join(params)
    if blocks.bm >= g.rows:
        # in a helper, so that A and the first panel die with it: a later stage of the
        # same kernel must not find them still live in SBUF
        bn0 = min(blocks.bn, g.n)
        whole = kernel.names.fresh("gemm_whole_a")
        blk = Block(depth=1)
        blk.comment("A is loaded once; its K tiles interleave with the first panel's")
        blk.line(f"a_sb = nl.ndarray(({PMAX}, {fns.kt}, {g.rows}), dtype={compute}, "
                 "buffer=nl.sbuf)")
        blk.line(f"b_sb = nl.ndarray(({PMAX}, {fns.kt}, {bn0}), dtype={compute}, "
                 "buffer=nl.sbuf)")
        blk.line(f"{fns.pair}(a_sb, a_v, {ga}, 0, {g.rows}, b_sb, b_v, {gb}, 0, {bn0})")
        blk.line(f"{fns.block}(a_sb, b_sb, {ps}, g, 0, {g.rows}, 0, {bn0})")
        if g.n > bn0:
            call = (f"{_emit_panel(fns, blocks)}(a_v, b_v, a_sb, {ps}, g, {ga}, {gb}, "
                    "{x0}, {xsz})")
            _emit_shifted(blk, Axis("n", g.n - bn0, blocks.bn), bn0, call)
        kernel.helpers.append([f"def {whole}(a_v, b_v, {ps}, g):",
                               '    """Every output column of group g, A resident."""',
                               *blk.lines])
        inner.line(f"{whole}({a_v}, {b_v}, {ps}, g)")
    else:
        call = (f"{_emit_panel(fns, blocks)}({a_v}, {b_v}, None, {ps}, g, {ga}, {gb}, "
                "{n0}, {nsz})")
        emit_grid(inner, [Axis("n", g.n, blocks.bn)], call, "affine_range")
    body.lines += inner.lines


class _Fns:
    """The helpers every form shares: loaders (one operand, or both interleaved by K
    tile) and the compute of one M block x N panel."""

    def __init__(self, kernel: Kernel, g: Gemm, compute: str, store: tuple[str, str, bool],
                 params: list[str]) -> None:
        self.kernel, self.g, self.compute, self.params = kernel, g, compute, params
        self.kt = _tiles(g.k, PMAX)
        direct = {"a": g.a_transposed, "b": not g.b_transposed}
        self.ktile = _emit_ktile(kernel) if any(direct.values()) else ""
        self.rows = _emit_rows(kernel, g.k, compute) if not all(direct.values()) else ""
        self.load = {side: self._single(side, d) for side, d in direct.items()}
        self.pair = self._pair(direct)
        self.block = _emit_compute(kernel, g, store, params)

    def _single(self, side: str, direct: bool) -> str:
        if not direct:
            return self.rows
        fn = self.kernel.names.fresh(f"gemm_load_{side}")
        self.kernel.helpers.append([
            f"def {fn}(dst, src_v, gi, x0, w):",
            f'    """{side.upper()}\'s block at x0 (stored [K, *]), one DMA per K tile."""',
            f"    for kk in range({self.kt}):",
            f"        {self.ktile}(dst, src_v, gi, x0, w, kk, min({PMAX}, {self.g.k} - kk * "
            f"{PMAX}))"])
        return fn

    def _pair(self, direct: dict[str, bool]) -> str:
        fn = self.kernel.names.fresh("gemm_load_pair")
        args = {"a": "a_dst, a_v, ga, m0, bm", "b": "b_dst, b_v, gb, c0, bn"}
        lines = [f"    {self.rows}({args[s]})" for s in "ab" if not direct[s]]
        if any(direct.values()):
            lines += [f"    for kk in range({self.kt}):",
                      f"        ksz = min({PMAX}, {self.g.k} - kk * {PMAX})"]
            lines += [f"        {self.ktile}({args[s]}, kk, ksz)" for s in "ab" if direct[s]]
        self.kernel.helpers.append([
            f"def {fn}({args['a']}, {args['b']}):",
            '    """A\'s block and B\'s panel, K tile by K tile, so the first matmuls '
            'start as their tiles land."""', *lines])
        return fn


def _emit_panel(fns: _Fns, blocks: Blocks) -> str:
    """Columns c0..c0+bn: B's panel loaded once, then every M block against it."""
    kernel, g, ps = fns.kernel, fns.g, ", ".join(fns.params)
    fn = kernel.names.fresh("gemm_panel")
    blk = Block(depth=1)
    alloc = f"nl.ndarray(({PMAX}, {fns.kt}, %s), dtype={fns.compute}, buffer=nl.sbuf)"
    blk.line(f"b_sb = {alloc % 'bn'}")
    if blocks.bm >= g.rows:
        blk.line(f"{fns.load['b']}(b_sb, b_v, gb, c0, bn)")
        blk.line(f"{fns.block}(a_sb, b_sb, {ps}, g, 0, {g.rows}, c0, bn)")
    else:
        bm0 = blocks.bm
        blk.line(f"a_blk = {alloc % bm0}")
        blk.line(f"{fns.pair}(a_blk, a_v, ga, 0, {bm0}, b_sb, b_v, gb, c0, bn)")
        blk.line(f"{fns.block}(a_blk, b_sb, {ps}, g, 0, {bm0}, c0, bn)")
        mblock = kernel.names.fresh("gemm_mblock")
        kernel.helpers.append([
            f"def {mblock}(a_v, b_sb, {ps}, g, ga, m0, bm, c0, bn):",
            '    """Rows m0..m0+bm against the resident panel: A\'s block loaded once."""',
            f"    a_blk = {alloc % 'bm'}",
            f"    {fns.load['a']}(a_blk, a_v, ga, m0, bm)",
            f"    {fns.block}(a_blk, b_sb, {ps}, g, m0, bm, c0, bn)"])
        _emit_shifted(blk, Axis("m", g.rows - bm0, blocks.bm), bm0,
                      f"{mblock}(a_v, b_sb, {ps}, g, ga, {{x0}}, {{xsz}}, c0, bn)")
    kernel.helpers.append([f"def {fn}(a_v, b_v, a_sb, {ps}, g, ga, gb, c0, bn):",
                           '    """Output columns c0..c0+bn: B\'s panel loaded once, then every '
                           'M block."""', *blk.lines])
    return fn


def _emit_shifted(blk: Block, axis: Axis, shift: int, call: str) -> None:
    """Calls over the blocks after the first: `call` formatted with {x0} (start, `shift`
    elements in) and {xsz} (static size), full blocks in a loop, then the remainder."""
    full, rem = divmod(axis.extent, axis.tile)
    if full == 1:
        blk.line(call.format(x0=shift, xsz=axis.tile))
    elif full > 1:
        blk.line(f"for {axis.var} in nl.affine_range({full}):")
        blk.line("    " + call.format(x0=f"{shift} + {axis.var} * {axis.tile}", xsz=axis.tile))
    if rem:
        blk.line(call.format(x0=shift + full * axis.tile, xsz=rem))


def _emit_ktile(kernel: Kernel) -> str:
    """One K tile of an operand stored [K, *] (its free dim contiguous): one DMA."""
    fn = kernel.names.fresh("gemm_load_ktile")
    kernel.helpers.append([
        f"def {fn}(dst, src_v, gi, x0, w, kk, ksz):",
        '    """K tile kk (ksz rows) of the slice x0..x0+w of an operand stored [K, *]."""',
        f"    nisa.dma_copy(dst=dst[0:ksz, kk, 0:w], src=src_v[gi, nl.ds(kk * {PMAX}, ksz), "
        "nl.ds(x0, w)])"])
    return fn


def _emit_rows(kernel: Kernel, k: int, compute: str) -> str:
    """An operand stored [*, K]: one DMA per 128 rows (runs of K elements), each 128 x 128
    block transposed on the PE into PSUM and copied into place, once per load."""
    fn = kernel.names.fresh("gemm_load_rows")
    blk = Block(depth=1)
    blk.comment(f"stored [w, K]: load whole rows, transpose each {PMAX} x {PMAX} block "
                "on the PE, once per load")
    blk.line(f"for r in range((w + {PMAX - 1}) // {PMAX}):")
    blk.line(f"    h = min({PMAX}, w - r * {PMAX})")
    blk.line(f"    nat = nl.ndarray((h, {k}), dtype={compute}, buffer=nl.sbuf)")
    blk.line(f"    nisa.dma_copy(dst=nat, src=src_v[gi, nl.ds(x0 + r * {PMAX}, h), 0:{k}])")
    blk.line(f"    for kk in range({_tiles(k, PMAX)}):")
    blk.line(f"        ksz = min({PMAX}, {k} - kk * {PMAX})")
    blk.line(f"        flip = nl.ndarray((ksz, h), dtype={compute}, buffer=nl.psum)")
    blk.line(f"        nisa.nc_transpose(flip, nat[0:h, nl.ds(kk * {PMAX}, ksz)])")
    blk.line(f"        nisa.tensor_copy(dst[0:ksz, kk, nl.ds(r * {PMAX}, h)], flip)")
    kernel.helpers.append([f"def {fn}(dst, src_v, gi, x0, w):",
                           '    """Slice x0..x0+w of an operand stored [*, K] into dst '
                           f'[{PMAX}, KT, w]."""', *blk.lines])
    return fn


def _emit_compute(kernel: Kernel, g: Gemm, store: tuple[str, str, bool],
                  params: list[str]) -> str:
    """Every [128, 512] output tile of an M block x N panel from the resident blocks.

    `store`: (the store helper, the output dtype, whether there is no epilogue). Without
    an epilogue each PSUM tile is copied straight into the output dtype, into a
    [128, bn] row of the panel, stored with one DMA (runs of bn elements, not 512).
    """
    store_fn, out_dtype, plain = store
    fn = kernel.names.fresh("gemm_block")
    blk = Block(depth=1)
    blk.line(f"for mt in range((bm + {PMAX - 1}) // {PMAX}):")
    blk.line(f"    p = min({PMAX}, bm - mt * {PMAX})")
    if plain:
        blk.line(f"    row = nl.ndarray((p, bn), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    blk.line(f"    for nt in range((bn + {NMAX - 1}) // {NMAX}):")
    blk.line(f"        q = min({NMAX}, bn - nt * {NMAX})")
    blk.line("        acc = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"        for kk in range({_tiles(g.k, PMAX)}):")
    blk.line(f"            ksz = min({PMAX}, {g.k} - kk * {PMAX})")
    blk.line(f"            nisa.nc_matmul(acc, a_sb[0:ksz, kk, nl.ds(mt * {PMAX}, p)], "
             f"b_sb[0:ksz, kk, nl.ds(nt * {NMAX}, q)])")
    if plain:
        blk.line(f"        nisa.tensor_copy(row[0:p, nl.ds(nt * {NMAX}, q)], acc)")
        blk.line(f"    nl.store(out_v[0, nl.ds(g * {g.rows} + m0 + mt * {PMAX}, p), "
                 "nl.ds(c0, bn)], row)")
    else:
        blk.line(f"        {store_fn}(acc, {', '.join(params)}, g, m0 + mt * {PMAX}, p, "
                 f"c0 + nt * {NMAX}, q)")
    kernel.helpers.append([f"def {fn}(a_sb, b_sb, {', '.join(params)}, g, m0, bm, c0, bn):",
                           '    """Every output tile of rows m0..m0+bm, columns c0..c0+bn: K '
                           'accumulates in PSUM."""', *blk.lines])
    return fn
