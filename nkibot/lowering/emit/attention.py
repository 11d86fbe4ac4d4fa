"""Scaled dot-product attention, flash-style: softmax(Q K^T * scale) V in one pass over K/V.

For each head g and each block of <= 128 query rows (the partitions of every tile here):

- Q's block [p, E] is loaded once and transposed on the Tensor Engine into E-chunks of
  <= 128 partitions: the stationary operands of the score matmul.
- K and V stream through in tiles of <= 512 keys (`gemm_moving_fmax`, one fp32 PSUM bank
  of scores per partition). K's rows are transposed on the PE into [E-chunk, keys]
  moving operands; the scores S = Q K^T accumulate over the E-chunks in PSUM.
- The softmax runs on the other engines: the row max on the Vector Engine, then
  `exp(scale * S - m)` on the Scalar Engine with its row sums accumulated by the same
  instruction. Across key tiles a running max m and sum l rescale the accumulator
  (`alpha = exp(m_old - m_new)`), so only one tile of scores is ever live: any sequence
  length fits SBUF.
- P's [p, <=128] blocks are transposed on the PE and P V accumulates over the key blocks
  in PSUM ([p, <=512] per bank of V's columns), then is folded into the SBUF accumulator.
- The accumulator is divided by l once, at the end, and stored.

bf16/fp16 inputs keep the Tensor Engine operands (Q, K, V and the probabilities P) in that
dtype; scores, statistics and the accumulator are fp32. Hardware sizes: `nl.tile_size.pmax`
(128 partitions), `gemm_stationary_fmax` (128), `gemm_moving_fmax` (512) and
`psum_bank_fmax` (2 KiB of fp32 per partition per bank), from
aws-neuron-sdk nki/api/nki.language.tile_size.rst.
"""

from __future__ import annotations

import math

from nkibot.lowering.emit.attnrows import (
    Dims,
    emit_q_stored_t,
    emit_q_turned,
    emit_resident,
    emit_whole_rows,
    whole_rows,
)
from nkibot.lowering.emit.builder import PMAX, Block, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import LayoutError, Resolved, last_two_swapped

KV_TILE = 512  # keys per score tile: gemm_moving_fmax, one fp32 PSUM bank per partition
V_COLS = 512  # V's columns per P V matmul: gemm_moving_fmax
LOW = {"bfloat16", "float16"}
#: SBUF bytes per partition a head's resident K^T and V may take
RESIDENT_BUDGET = 64 * 1024


def _leaf(res: Resolved, arg: object, what: str) -> tuple[str, str, tuple[int, ...], bool]:
    """(kernel argument, dtype, shape, stored transposed) of an attention operand: an
    input, possibly reshaped or with its last two dims swapped (stored [.., E, L], AWS's
    kernels' layout), or the HBM scratch a layout copy wrote (not a leaf of this group)."""
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"attention's {what} is computed; only inputs are lowered")
    view = res.views[res.target(arg.name)]
    if view.sliced or (view.transposed and not last_two_swapped(view)):
        raise LayoutError(f"attention's {what} is a transposed or sliced view")
    return view.leaf.name, view.leaf.dtype, view.shape, view.transposed


def emit_attention(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1 or res.target(outputs[0].name) != res.ops[0].name:
        raise LayoutError("attention with other ops in the graph (only a lone "
                          "scaled_dot_product_attention is lowered)")
    op = res.ops[0]
    (q, qd, qs, qt), (k, kd, ks, kt), (v, vd, vs, vt) = (
        _leaf(res, a, w) for a, w in zip(op.args, "QKV", strict=True))
    if len({qd, kd, vd}) != 1:
        raise LayoutError(f"attention operands of mixed dtypes ({qd}, {kd}, {vd})")
    heads, length, emb = math.prod(op.shape[:-2]), qs[-2], qs[-1]
    keys, ev = ks[-2], vs[-1]
    compute = nl_dtype(qd) if qd in LOW else "nl.float32"
    body = kernel.body
    mask = " with the causal mask" if op.attr("causal", False) else ""
    body.comment(f"{op.origin}: softmax(Q K^T * {op.attr('scale')!r}{mask}) V, {heads} heads of "
                 f"{length} queries x {keys} keys, E={emb}, Ev={ev}")
    for name, var, n, cols, stored_t in (("q_v", q, length, emb, qt), ("k_v", k, keys, emb, kt),
                                         ("v_v", v, keys, ev, vt)):
        if stored_t:
            body.comment(f"{name[0].upper()} is stored [{cols}, {n}] per head (transposed "
                         "in the module): read in that layout")
        shape = (heads, cols, n) if stored_t else (heads, n, cols)
        body.line(f"{name} = {var}.reshape({shape!r})")
    body.line(f"out_v = {outputs[0].var}.reshape(({heads}, {length}, {ev}))")
    dims = Dims(emb, ev, float(str(op.attr("scale"))), compute, nl_dtype(outputs[0].dtype))
    dims.causal, dims.keys = bool(op.attr("causal", False)), keys
    dims.qt, dims.kt, dims.vt = qt, kt, vt
    single = keys <= KV_TILE
    item = 2 if qd in LOW else 4
    dims.resident = keys % PMAX == 0 and keys // PMAX * (dims.ke * PMAX + ev) * item <= (
        RESIDENT_BUDGET)
    if whole_rows(dims, keys):
        rows = emit_whole_rows(kernel, dims, keys, op.origin)
    else:
        first = _emit_step(kernel, op, dims, first=True, only=single)
        later = first if single else _emit_step(kernel, op, dims, first=False, only=False)
        rows = _emit_rows(kernel, dims, keys, first, later)
    full, rem = divmod(length, PMAX)
    body.line(f"for g in nl.affine_range({heads}):")
    body.indent()
    kv = "k_v, v_v"
    if dims.resident:
        kv = "k_all, v_all"
        emit_resident(body, kernel, dims, keys)
    if full == 1:
        body.line(f"{rows}(q_v, {kv}, out_v, g, 0, {PMAX})")
    elif full > 1:
        body.line(f"for qt in nl.affine_range({full}):")
        body.line(f"    {rows}(q_v, {kv}, out_v, g, qt * {PMAX}, {PMAX})")
    if rem:
        body.line(f"{rows}(q_v, {kv}, out_v, g, {full * PMAX}, {rem})")
    body.dedent()


def _emit_rows(kernel: Kernel, d: Dims, keys: int, first: str, later: str) -> str:
    """Query rows q0..q0+p of head g: Q^T resident, the key tiles in order, then 1 / l."""
    fn = kernel.names.fresh("attention_rows")
    blk = Block(depth=1)
    if d.qt:
        emit_q_stored_t(blk, d)
    else:
        emit_q_turned(blk, d)
    _emit_rows_tail(blk, d, keys, first, later)
    kernel.helpers.append([f"def {fn}(q_v, k_v, v_v, out_v, g, q0, p):",
                           '    """Query rows q0..q0+p of head g, over every key tile."""',
                           *blk.lines])
    return fn


def _emit_rows_tail(blk: Block, d: Dims, keys: int, first: str, later: str) -> None:
    """The statistics, the key tiles in order, then 1 / l and the store."""
    single = keys <= KV_TILE
    blk.comment("running -max of the scaled scores (neg_m), row sum l" + (
        " and the normalised output o" if single else " and the unnormalised output o (fp32)"))
    blk.line("neg_m = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("l = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"o = nl.ndarray((p, {d.ev}), dtype={d.out if single else 'nl.float32'}, "
             "buffer=nl.sbuf)")
    args = "q_t, k_v, v_v, neg_m, l, o, g, q0, p"
    full, rem = divmod(keys, KV_TILE)
    if single:
        blk.line(f"{first}({args}, 0, {keys})")
        blk.line(f"nl.store(out_v[g, nl.ds(q0, p), 0:{d.ev}], o)")
    else:
        blk.line(f"{first}({args}, 0, {KV_TILE})")
        if full > 1:
            blk.comment("later key tiles rescale what the earlier ones accumulated")
            blk.line(f"for kt in nl.sequential_range({full - 1}):")
            blk.line(f"    {later}({args}, (kt + 1) * {KV_TILE}, {KV_TILE})")
        if rem:
            blk.line(f"{later}({args}, {full * KV_TILE}, {rem})")
        blk.comment("softmax denominator, once: out = o / l")
        blk.line("inv_l = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.reciprocal(inv_l, l)")
        blk.line(f"res = nl.ndarray((p, {d.ev}), dtype={d.out}, buffer=nl.sbuf)")
        blk.line("nisa.tensor_scalar(dst=res, data=o, op0=nl.multiply, operand0=inv_l)")
        blk.line(f"nl.store(out_v[g, nl.ds(q0, p), 0:{d.ev}], res)")


def _emit_step(kernel: Kernel, op: Op, d: Dims, first: bool, only: bool) -> str:
    """One key tile k0..k0+st: scores, softmax statistics, P V into the accumulator.

    `first`: no earlier tile to rescale; `only`: the single tile, whose P V is normalised
    straight out of PSUM into the output tile `o`.
    """
    fn = kernel.names.fresh("attention_first" if first else "attention_step")
    blk = Block(depth=1)
    if d.resident:
        blk.comment("K^T and V are resident: this tile's keys are columns k0..k0+st of K^T "
                    f"and V's blocks k0 // {PMAX} on")
        blk.line(f"k_t = k_v[0:{PMAX}, 0:{d.ke}, nl.ds(k0, st)]")
        blk.line(f"v_sb = v_v[0:{PMAX}, nl.ds(k0 // {PMAX}, (st + {PMAX - 1}) // {PMAX}), "
                 f"0:{d.ev}]")
    else:
        _emit_kv_tile(blk, d)
    _emit_scores(blk, op, d, first, only)
    kernel.helpers.append([f"def {fn}(q_t, k_v, v_v, neg_m, l, o, g, q0, p, k0, st):",
                           '    """Keys k0..k0+st of head g for the resident query rows."""',
                           *blk.lines])
    return fn


def _emit_kv_tile(blk: Block, d: Dims) -> None:
    """Streamed form: this key tile's K^T (loaded as it lies when K is stored [E, keys],
    else K's rows turned on the PE) and V's rows (turned on the PE when stored [Ev, keys])."""
    cd = d.compute
    blk.comment("K^T as [E-chunk, keys] (moving operands) and V's rows [keys, Ev]")
    blk.line(f"k_t = nl.ndarray(({PMAX}, {d.ke}, st), dtype={cd}, buffer=nl.sbuf)")
    blk.line(f"v_sb = nl.ndarray(({PMAX}, (st + {PMAX - 1}) // {PMAX}, {d.ev}), dtype={cd}, "
             "buffer=nl.sbuf)")
    if d.kt:
        for e in range(d.ke):
            ew = min(PMAX, d.emb - e * PMAX)
            blk.line(f"nisa.dma_copy(dst=k_t[0:{ew}, {e}, 0:st], "
                     f"src=k_v[g, {e * PMAX}:{e * PMAX + ew}, nl.ds(k0, st)])")
    blk.line(f"for c in range((st + {PMAX - 1}) // {PMAX}):")
    blk.line(f"    w = min({PMAX}, st - c * {PMAX})")
    if not d.kt:
        blk.line(f"    k_nat = nl.load(k_v[g, nl.ds(k0 + c * {PMAX}, w), 0:{d.emb}], "
                 f"dtype={cd})")
        for e in range(d.ke):
            ew = min(PMAX, d.emb - e * PMAX)
            blk.line(f"    kt_ps = nl.ndarray(({ew}, w), dtype={cd}, buffer=nl.psum)")
            blk.line(f"    nisa.nc_transpose(kt_ps, k_nat[0:w, {e * PMAX}:{e * PMAX + ew}])")
            blk.line(f"    nisa.tensor_copy(dst=k_t[0:{ew}, {e}, nl.ds(c * {PMAX}, w)], "
                     "src=kt_ps)")
    if not d.vt:
        blk.line(f"    nisa.dma_copy(dst=v_sb[0:w, c, 0:{d.ev}], "
                 f"src=v_v[g, nl.ds(k0 + c * {PMAX}, w), 0:{d.ev}])")
        return
    for e0 in range(0, d.ev, PMAX):
        ew = min(PMAX, d.ev - e0)
        blk.line(f"    v_nat = nl.ndarray(({ew}, w), dtype={cd}, buffer=nl.sbuf)")
        blk.line(f"    nisa.dma_copy(dst=v_nat, src=v_v[g, {e0}:{e0 + ew}, "
                 f"nl.ds(k0 + c * {PMAX}, w)])")
        blk.line(f"    vt_ps = nl.ndarray((w, {ew}), dtype={cd}, buffer=nl.psum)")
        blk.line("    nisa.nc_transpose(vt_ps, v_nat)")
        blk.line(f"    nisa.tensor_copy(dst=v_sb[0:w, c, {e0}:{e0 + ew}], src=vt_ps)")


def _emit_scores(blk: Block, op: Op, d: Dims, first: bool, only: bool) -> None:
    """Scores, softmax statistics and P V of one key tile (k_t and v_sb in place)."""
    cd = d.compute
    blk.comment(f"{op.origin}: scores S = (scale Q) K^T, contracted over E on the partitions "
                "(fp32 PSUM)")
    blk.line("s_ps = nl.ndarray((p, st), dtype=nl.float32, buffer=nl.psum)")
    for e in range(d.ke):
        ew = min(PMAX, d.emb - e * PMAX)
        blk.line(f"nisa.nc_matmul(s_ps, q_t[0:{ew}, {e}, 0:p], k_t[0:{ew}, {e}, 0:st])")
    scores = "s_ps"
    if d.causal:
        blk.line("s_sb = nl.ndarray((p, st), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.tensor_copy(dst=s_sb, src=s_ps)")
        if d.resident:
            j = d.keys // PMAX
            blk.comment(f"is_causal: column c * {PMAX} + r of this tile is key (k0 // {PMAX} + "
                        f"c) + {j} * r (resident order); hidden from query q0 + i when it is "
                        "past the query (one GpSimd select on that affine index)")
            blk.line(f"nisa.affine_select(dst=s_sb, pattern=[[-1, st // {PMAX}], [-{j}, {PMAX}]], "
                     "channel_multiplier=1, on_true_tile=s_sb, on_false_value=float(\"-inf\"), "
                     f"cmp_op=nl.greater_equal, offset=q0 - k0 // {PMAX})")
        else:
            blk.comment("is_causal: key k0 + j is hidden from query q0 + i when j > i + q0 - k0 "
                        "(one GpSimd select on that affine index)")
            blk.line("nisa.affine_select(dst=s_sb, pattern=[[-1, st]], channel_multiplier=1, "
                     "on_true_tile=s_sb, on_false_value=float(\"-inf\"), "
                     "cmp_op=nl.greater_equal, offset=q0 - k0)")
        scores = "s_sb"
    if first:
        blk.comment("softmax: -max of the row on the Vector Engine")
        blk.line(f"nisa.tensor_reduce(dst=neg_m, op=nl.maximum, data={scores}, axis=1, "
                 "negate=True)")
        sums = "l"
    else:
        blk.comment("softmax: the new running -max, and alpha = exp(m_old - m_new) to rescale "
                    "what earlier key tiles accumulated")
        blk.line("neg_t = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.tensor_reduce(dst=neg_t, op=nl.maximum, data={scores}, axis=1, "
                 "negate=True)")
        blk.line("neg_new = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.tensor_tensor(dst=neg_new, data1=neg_t, data2=neg_m, op=nl.minimum)")
        blk.line("alpha = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=alpha, op=nl.exp, data=neg_m, bias=neg_new, scale=-1.0)")
        blk.line("nisa.tensor_copy(dst=neg_m, src=neg_new, engine=nisa.engine.gpsimd)")
        blk.line("rs = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        sums = "rs"
    blk.comment("P = exp(S - m) on the Scalar Engine, its row sums from the same instruction")
    blk.line(f"prob = nl.ndarray((p, st), dtype={cd}, buffer=nl.sbuf)")
    blk.line(f"nisa.activation(dst=prob, op=nl.exp, data={scores}, bias=neg_m, "
             f"reduce_op=nl.add, reduce_res={sums})")
    if not first:
        blk.line("nisa.tensor_scalar(dst=l, data=l, op0=nl.multiply, operand0=alpha, "
                 "op1=nl.add, operand1=rs)")
    if only:
        blk.line("inv_l = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.reciprocal(inv_l, l)")
    blk.comment("P's [p, keys] blocks transposed on the PE (copied out by the Scalar Engine): "
                "the stationary operands of P V")
    blk.line(f"p_t = nl.ndarray(({PMAX}, (st + {PMAX - 1}) // {PMAX}, p), dtype={cd}, "
             "buffer=nl.sbuf)")
    blk.line(f"for c in range((st + {PMAX - 1}) // {PMAX}):")
    blk.line(f"    w = min({PMAX}, st - c * {PMAX})")
    blk.line(f"    pt_ps = nl.ndarray((w, p), dtype={cd}, buffer=nl.psum)")
    blk.line(f"    nisa.nc_transpose(pt_ps, prob[0:p, nl.ds(c * {PMAX}, w)])")
    blk.line("    nisa.activation(dst=p_t[0:w, c, 0:p], op=nl.copy, data=pt_ps)")
    for c0 in range(0, d.ev, V_COLS):
        cw = min(V_COLS, d.ev - c0)
        cols = f"{c0}:{c0 + cw}"
        blk.comment(f"{op.origin}: P V for V's columns {cols}, accumulated over the key blocks")
        blk.line(f"pv_ps = nl.ndarray((p, {cw}), dtype=nl.float32, buffer=nl.psum)")
        blk.line(f"for c in range((st + {PMAX - 1}) // {PMAX}):")
        blk.line(f"    w = min({PMAX}, st - c * {PMAX})")
        blk.line(f"    nisa.nc_matmul(pv_ps, p_t[0:w, c, 0:p], v_sb[0:w, c, {cols}])")
        if only:
            blk.line(f"nisa.tensor_scalar(dst=o[0:p, {cols}], data=pv_ps, op0=nl.multiply, "
                     "operand0=inv_l)")
        elif first:
            blk.line(f"nisa.tensor_copy(dst=o[0:p, {cols}], src=pv_ps)")
        else:
            blk.line(f"nisa.scalar_tensor_tensor(dst=o[0:p, {cols}], data=o[0:p, {cols}], "
                     "op0=nl.multiply, operand0=alpha, op1=nl.add, operand1=pv_ps)")
