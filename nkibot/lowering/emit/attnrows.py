"""Attention's per-head pieces shared by its two forms (`attention.py`): the dims record,
Q's stationary E-chunks, resident K^T and V, and the whole-row form.

The whole-row form (AWS's `attn_fwd_v7` does the same): when a head's keys fit four fp32
PSUM banks (<= 2048) and K^T and V are resident, a query block's scores for every key
are computed at once (one PSUM tile per 512 keys), the row max is taken over all of them,
`exp(S - max)` and its row sums come from one Scalar Engine instruction per tile, and P V
accumulates over every key block in PSUM: no running max, no rescaling of earlier key
tiles (the flash form's `alpha`), and no sequential chain between key tiles.
"""

from __future__ import annotations

from nkibot.lowering.emit.builder import PMAX, Block
from nkibot.lowering.emit.rowwise import Kernel

KV_TILE = 512  # keys per score tile: gemm_moving_fmax, one fp32 PSUM bank per partition
V_COLS = 512  # V's columns per P V matmul: gemm_moving_fmax
#: keys a whole-row query block holds in PSUM: 4 of the 8 banks of 2 KiB fp32
WHOLE_KEYS = 4 * KV_TILE


class Dims:
    def __init__(self, emb: int, ev: int, scale: float, compute: str, out: str) -> None:
        self.emb, self.ev, self.scale, self.compute, self.out = emb, ev, scale, compute, out
        self.ke = -(-emb // PMAX)  # E-chunks on the partitions of the score matmul
        self.resident = False  # K^T and V loaded once per head (_emit_resident)
        self.causal = False  # is_causal: scores past the diagonal are -inf
        self.keys = 0
        self.qt = self.kt = self.vt = False  # stored [.., E, L]: transposed in the module


def emit_resident(body: Block, kernel: Kernel, d: Dims, keys: int) -> None:
    """K^T and V of head g loaded once for all its query blocks. K^T's column j * 128 + r
    and V's block j, partition r, hold the same key: softmax and P V only need that.
    With K and V both stored [keys, *], partition r holds keys r * J .. r * J + J - 1
    (J = keys / 128), so each loads with one DMA of J-row runs, and key block j is keys
    r * J + j. When either is stored transposed, keys stay in order (block j is keys
    j * 128 + r): a transposed K loads straight into K^T, a transposed V is turned on the
    Tensor Engine block by block."""
    fn = kernel.names.fresh("attention_kv")
    j, cd = keys // PMAX, d.compute
    natural = d.kt or d.vt
    rows = (f".reshape(({j}, {PMAX}, {{c}})).permute((1, 0, 2))" if natural
            else f".reshape(({PMAX}, {j}, {{c}}))")
    blk = Block(depth=1)
    if d.kt:
        for e in range(d.ke):
            ew = min(PMAX, d.emb - e * PMAX)
            blk.line(f"nisa.dma_copy(dst=k_all[0:{ew}, {e}, 0:{keys}], "
                     f"src=k_v[g, {e * PMAX}:{e * PMAX + ew}, 0:{keys}])")
    else:
        blk.line(f"k_nat = nl.ndarray(({PMAX}, {j}, {d.emb}), dtype={cd}, buffer=nl.sbuf)")
        blk.line(f"nisa.dma_copy(dst=k_nat, src=k_v[g]{rows.format(c=d.emb)})")
        blk.line(f"for c in range({j}):")
        for e in range(d.ke):
            ew = min(PMAX, d.emb - e * PMAX)
            blk.line(f"    kt_ps = nl.ndarray(({ew}, {PMAX}), dtype={cd}, buffer=nl.psum)")
            blk.line(f"    nisa.nc_transpose(kt_ps, k_nat[0:{PMAX}, c, "
                     f"{e * PMAX}:{e * PMAX + ew}])")
            blk.line(f"    nisa.tensor_copy(dst=k_all[0:{ew}, {e}, nl.ds(c * {PMAX}, {PMAX})], "
                     "src=kt_ps)")
    if d.vt:
        for e0 in range(0, d.ev, PMAX):
            ew = min(PMAX, d.ev - e0)
            blk.line(f"v_nat = nl.ndarray(({ew}, {keys}), dtype={cd}, buffer=nl.sbuf)")
            blk.line(f"nisa.dma_copy(dst=v_nat, src=v_v[g, {e0}:{e0 + ew}, 0:{keys}])")
            blk.line(f"for c in range({j}):")
            blk.line(f"    vt_ps = nl.ndarray(({PMAX}, {ew}), dtype={cd}, buffer=nl.psum)")
            blk.line(f"    nisa.nc_transpose(vt_ps, v_nat[0:{ew}, nl.ds(c * {PMAX}, {PMAX})])")
            blk.line(f"    nisa.tensor_copy(dst=v_all[0:{PMAX}, c, {e0}:{e0 + ew}], src=vt_ps)")
    else:
        blk.line(f"nisa.dma_copy(dst=v_all, src=v_v[g]{rows.format(c=d.ev)})")
    kernel.helpers.append([f"def {fn}(k_all, v_all, k_v, v_v, g):",
                           '    """Head g\'s K^T [E-chunks, keys] and V [128, J, Ev], keys '
                           'in the same order (see _emit_resident)."""', *blk.lines])
    body.comment(f"K^T and V of head g resident for every query block ({keys} keys)")
    body.line(f"k_all = nl.ndarray(({PMAX}, {d.ke}, {keys}), dtype={cd}, buffer=nl.sbuf)")
    body.line(f"v_all = nl.ndarray(({PMAX}, {j}, {d.ev}), dtype={cd}, buffer=nl.sbuf)")
    body.line(f"{fn}(k_all, v_all, k_v, v_v, g)")


def emit_q_stored_t(blk: Block, d: Dims) -> None:
    """Q stored [E, L]: its E-chunks are the stationary operands as they lie in HBM."""
    blk.comment("Q stored [E, L]: each E-chunk of this block loads as a stationary operand"
                + (f"; the scale {d.scale!r} on the Scalar Engine" if d.scale != 1.0 else ""))
    blk.line(f"q_t = nl.ndarray(({PMAX}, {d.ke}, p), dtype={d.compute}, buffer=nl.sbuf)")
    for e in range(d.ke):
        w = min(PMAX, d.emb - e * PMAX)
        rows = f"{e * PMAX}:{e * PMAX + w}"
        if d.scale == 1.0:
            blk.line(f"nisa.dma_copy(dst=q_t[0:{w}, {e}, 0:p], src=q_v[g, {rows}, nl.ds(q0, p)])")
            continue
        blk.line(f"q_raw = nl.ndarray(({w}, p), dtype={d.compute}, buffer=nl.sbuf)")
        blk.line(f"nisa.dma_copy(dst=q_raw, src=q_v[g, {rows}, nl.ds(q0, p)])")
        blk.line(f"nisa.activation(dst=q_t[0:{w}, {e}, 0:p], op=nl.copy, data=q_raw, "
                 f"scale={d.scale!r})")


def emit_q_turned(blk: Block, d: Dims) -> None:
    """Q stored [L, E]: its block transposed on the PE into E-chunks."""
    blk.comment("Q's block, transposed on the Tensor Engine into E-chunks (stationary operands); "
                f"the copy out of PSUM (Scalar Engine) applies the scale {d.scale!r}")
    blk.line(f"q_nat = nl.load(q_v[g, nl.ds(q0, p), 0:{d.emb}], dtype={d.compute})")
    blk.line(f"q_t = nl.ndarray(({PMAX}, {d.ke}, p), dtype={d.compute}, buffer=nl.sbuf)")
    for e in range(d.ke):
        w = min(PMAX, d.emb - e * PMAX)
        blk.line(f"qt_ps = nl.ndarray(({w}, p), dtype={d.compute}, buffer=nl.psum)")
        blk.line(f"nisa.nc_transpose(qt_ps, q_nat[0:p, {e * PMAX}:{e * PMAX + w}])")
        blk.line(f"nisa.activation(dst=q_t[0:{w}, {e}, 0:p], op=nl.copy, data=qt_ps, "
                 f"scale={d.scale!r})")


def whole_rows(d: Dims, keys: int) -> bool:
    """The whole-row form applies: resident K^T/V, no mask, more keys than one tile but
    no more than WHOLE_KEYS, V's columns in one PSUM bank."""
    return d.resident and not d.causal and KV_TILE < keys <= WHOLE_KEYS and d.ev <= V_COLS


def emit_whole_rows(kernel: Kernel, d: Dims, keys: int, origin: str) -> str:
    """Query rows q0..q0+p of head g against all `keys` at once (see the module doc)."""
    fn = kernel.names.fresh("attention_rows")
    cd = d.compute
    tiles = [(k0, min(KV_TILE, keys - k0)) for k0 in range(0, keys, KV_TILE)]
    blk = Block(depth=1)
    if d.qt:
        emit_q_stored_t(blk, d)
    else:
        emit_q_turned(blk, d)
    blk.comment(f"{origin}: scores for all {keys} keys at once, one PSUM bank per "
                f"{KV_TILE} keys, contracted over E on the partitions")
    blk.line("s_ps = []")
    for _, w in tiles:
        blk.line(f"s_ps.append(nl.ndarray((p, {w}), dtype=nl.float32, buffer=nl.psum))")
    for t, (k0, w) in enumerate(tiles):
        for e in range(d.ke):
            ew = min(PMAX, d.emb - e * PMAX)
            blk.line(f"nisa.nc_matmul(s_ps[{t}], q_t[0:{ew}, {e}, 0:p], "
                     f"k_v[0:{ew}, {e}, {k0}:{k0 + w}])")
    n = len(tiles)
    blk.comment("softmax over the whole row: -max per tile, then of the tiles (Vector "
                "Engine); exp(S - max) with its row sums per tile (Scalar Engine)")
    blk.line(f"neg_t = nl.ndarray((p, {n}), dtype=nl.float32, buffer=nl.sbuf)")
    for t in range(n):
        blk.line(f"nisa.tensor_reduce(dst=neg_t[0:p, {t}:{t + 1}], op=nl.maximum, "
                 f"data=s_ps[{t}], axis=1, negate=True)")
    blk.line("neg_m = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_reduce(dst=neg_m, op=nl.minimum, data=neg_t, axis=1)")
    blk.line(f"sums = nl.ndarray((p, {n}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"prob = nl.ndarray((p, {keys}), dtype={cd}, buffer=nl.sbuf)")
    for t, (k0, w) in enumerate(tiles):
        blk.line(f"nisa.activation(dst=prob[0:p, {k0}:{k0 + w}], op=nl.exp, data=s_ps[{t}], "
                 f"bias=neg_m, reduce_op=nl.add, reduce_res=sums[0:p, {t}:{t + 1}])")
    blk.line("l = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_reduce(dst=l, op=nl.add, data=sums, axis=1)")
    blk.line("inv_l = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.reciprocal(inv_l, l)")
    blocks = keys // PMAX
    blk.comment("P's [p, 128] blocks transposed on the PE (copied out by the Scalar Engine): "
                "the stationary operands of P V")
    blk.line(f"p_t = nl.ndarray(({PMAX}, {blocks}, p), dtype={cd}, buffer=nl.sbuf)")
    blk.line(f"for c in range({blocks}):")
    blk.line(f"    pt_ps = nl.ndarray(({PMAX}, p), dtype={cd}, buffer=nl.psum)")
    blk.line(f"    nisa.nc_transpose(pt_ps, prob[0:p, nl.ds(c * {PMAX}, {PMAX})])")
    blk.line(f"    nisa.activation(dst=p_t[0:{PMAX}, c, 0:p], op=nl.copy, data=pt_ps)")
    blk.comment(f"{origin}: P V accumulated over every key block in PSUM, then / l")
    blk.line(f"pv_ps = nl.ndarray((p, {d.ev}), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"for c in range({blocks}):")
    blk.line(f"    nisa.nc_matmul(pv_ps, p_t[0:{PMAX}, c, 0:p], v_v[0:{PMAX}, c, 0:{d.ev}])")
    blk.line(f"res = nl.ndarray((p, {d.ev}), dtype={d.out}, buffer=nl.sbuf)")
    blk.line("nisa.tensor_scalar(dst=res, data=pv_ps, op0=nl.multiply, operand0=inv_l)")
    blk.line(f"nl.store(out_v[g, nl.ds(q0, p), 0:{d.ev}], res)")
    kernel.helpers.append([f"def {fn}(q_v, k_v, v_v, out_v, g, q0, p):",
                           '    """Query rows q0..q0+p of head g against every key at once."""',
                           *blk.lines])
    return fn
