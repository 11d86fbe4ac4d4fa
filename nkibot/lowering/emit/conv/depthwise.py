"""Depthwise convolution (groups == in == out channels): taps split between PE and Vector.

As an ordinary conv, a depthwise conv contracts over one input channel: each matmul uses
one of the 128 rows of the array, and fp32 costs four passes (cost model, ARCH1:269), so
it runs at a few thousandths of the roofline. Here, as in pooling, rows (batch x channels)
sit on the partitions with each row's zero-padded plane in the free dims. About PE_SHARE
of the taps are matmuls of the tap's window against diag(w[:, t]) (all 128 rows of the
array, PSUM accumulating); every other tap is one Vector Engine `scalar_tensor_tensor`:
`acc = window_t * w[row, t] + acc` (the first adds the PSUM sum), the weight a [P, 1]
column. The copy out (with the bias) runs on the Scalar Engine. With C <= 128 channels a
row tile holds whole batch elements (C * (128 // C) rows), so one weight tile and one set
of diagonal matrices, built once, serve every row tile. (The cost model's roofline counts
the diagonal matmuls' FLOPs, 128 times the useful ones: its fraction overstates these
kernels; see docs/lowering.md.)
"""

from __future__ import annotations

import itertools
import math

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.conv.epilogue import EVICT_ACT, Epilogue, emit_steps
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.schedule.convspec import ConvSpec, Dim
from nkibot.sim.cost.quick import SBUF_BYTES

PLANE_BUDGET = SBUF_BYTES // 2  # bytes per partition for the padded input plane
TILE_ELEMS = 4096  # output elements per partition per accumulator tile (Vector Engine only)
PSUM_ELEMS = 512  # ... with taps on the PE: one fp32 PSUM bank
PE_MIN_TAPS = 4  # fewer taps stay on the Vector Engine (its bigger tiles store in fewer DMAs)
#: The share of the taps on the PE (a diagonal weight matrix, fp32: 4 cycles a column)
#: against the Vector Engine (2 cycles an element) so that both finish together.
PE_SHARE = 0.55


def fits(spec: ConvSpec) -> bool:
    """A depthwise conv this path takes: one input channel per group (each feeding m output
    channels), C * m <= 128, plane in SBUF."""
    plane = math.prod(d.plane for d in spec.dims)
    return (not spec.transposed and spec.groups == spec.cin and spec.cout % spec.cin == 0
            and spec.cout <= PMAX and plane * 4 <= PLANE_BUDGET)


def emit_depthwise(kernel: Kernel, spec: ConvSpec, origin: str, x: str, w: str,
                   bias: str | None, out: Output, epi: Epilogue | None = None) -> None:
    """`epi`: an eval BatchNorm (its (scale, shift) table in `bias`) and activations or
    clamps, applied on the copy out (m == 1, no residual)."""
    c, m = spec.cin, spec.cout // spec.cin
    per_n = max(1, PMAX // (c * m))  # batch elements per tile
    per_n = min(per_n, spec.batch)
    per = per_n * c * m
    body = kernel.body
    ins = ", ".join(str(d.size_in) for d in spec.dims)
    outs = ", ".join(str(d.size_out) for d in spec.dims)
    order = "batch x channels" if m == 1 else f"batch x {m} multiples x channels"
    body.comment(f"{origin}: depthwise, on the Vector Engine: {order} on the partitions "
                 f"({per} rows a tile), {spec.taps} taps as per-partition weights")
    if m == 1:
        body.line(f"x_v = {x}.reshape(({spec.batch * c}, {ins}))")
        body.line(f"out_v = {out.var}.reshape(({spec.batch * c}, {outs}))")
    else:
        body.comment(f"output channel o = c * {m} + j reads input channel c; row (b, j, c) "
                     f"of a tile is partition (b * {m} + j) * {c} + c")
        body.line(f"x_v = {x}.reshape(({spec.batch}, {c}, {ins}))")
        body.line(f"out_v = {out.var}.reshape(({spec.batch}, {c}, {m}, {outs}))")
    body.line(f"w_v = {w}.reshape(({c}, {m}, {spec.taps}))")
    body.comment("weights (and bias) of every row: one tile, loaded once")
    body.line(f"w_sb = nl.ndarray(({per}, {spec.taps}), dtype=nl.float32, buffer=nl.sbuf)")
    cols = 2 if epi is not None and epi.norm is not None else 1  # (scale, shift) or bias
    if bias is not None:
        body.line(f"b_v = {bias}.reshape(({c}, {m}, {cols}))")
        body.line(f"b_sb = nl.ndarray(({per}, {cols}), dtype=nl.float32, buffer=nl.sbuf)")
    for r in range(0, per, c):
        j = (r // c) % m
        body.line(f"nisa.dma_copy(dst=w_sb[{r}:{r + c}, 0:{spec.taps}], src=w_v[0:{c}, {j}, "
                  f"0:{spec.taps}])")
        if bias is not None:
            body.line(f"nisa.dma_copy(dst=b_sb[{r}:{r + c}, 0:{cols}], src=b_v[0:{c}, {j}, "
                      f"0:{cols}])")
    pe_taps = _pe_taps(spec.taps)
    if pe_taps == 0:
        body.line("diag = w_sb  # few taps: all on the Vector Engine, no diagonal matrices")
    else:
        _emit_diagonals(body, per, pe_taps)
    tile_fn = _emit_tile(kernel, spec, origin, bias is not None, out.dtype, m, epi)
    rows_fn = _emit_rows(kernel, spec, tile_fn, bias is not None, m)
    args = "x_v, out_v, w_sb, diag" + (", b_sb" if bias is not None else "")
    if m == 1:
        emit_grid(body, [Axis("r", spec.batch * c, per)],
                  f"{rows_fn}({args}, {{r0}}, {{rsz}})", "affine_range")
    else:
        emit_grid(body, [Axis("n", spec.batch, per_n)],
                  f"{rows_fn}({args}, {{n0}}, {{nsz}})", "affine_range")


def _emit_diagonals(body: Block, per: int, pe_taps: int) -> None:
    """diag[:, t, :] = diag(w[:, t]) for the PE's taps: an iota identity scaled per row."""
    body.comment(f"the first {pe_taps} taps run on the PE as diagonal matrices diag(w[:, t]) "
                 "(built once); PSUM accumulates them, the Vector Engine adds the rest")
    body.line(f"iota_t = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.iota(iota_t, [[1, {per}]], offset=0, channel_multiplier=-1)")
    body.line("ident = nl.equal(iota_t, 0.0, dtype=nl.float32)")
    body.line(f"diag = nl.ndarray(({per}, {pe_taps}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"for t in range({pe_taps}):")
    body.line(f"    nisa.tensor_scalar(dst=diag[0:{per}, t, 0:{per}], data=ident, "
              "op0=nl.multiply, "
              f"operand0=w_sb[0:{per}, t:t + 1])")


def _pe_taps(taps: int) -> int:
    """Taps for the PE: about PE_SHARE of them, leaving the Vector Engine at least one (none
    below PE_MIN_TAPS: KernelBench 83's 3 taps took 226 us split, 178 us on the Vector
    Engine alone, model estimate trn1)."""
    return 0 if taps < PE_MIN_TAPS else min(taps - 1, round(taps * PE_SHARE))


def _emit_rows(kernel: Kernel, spec: ConvSpec, tile_fn: str, bias: bool, m: int) -> str:
    """m == 1: rows r0..r0+p; else batch elements r0..r0+p (p = their count)."""
    fn = kernel.names.fresh("depthwise_rows")
    blk = Block(depth=1)
    dims = spec.dims
    plane = ", ".join(str(d.plane) for d in dims)
    c = spec.cin
    if m > 1:
        blk.line(f"rows = p * {c * m}")
    rows = "p" if m == 1 else "rows"
    blk.line(f"x_sb = nl.ndarray(({rows}, {plane}), dtype=nl.float32, buffer=nl.sbuf)")
    if any(d.plane != d.size_in or d.lead for d in dims):
        blk.comment("zero padding")
        blk.line("nisa.memset(dst=x_sb, value=0.0)")
    placed = [d.placed() for d in dims]
    dst = ", ".join(f"{start}:{start + count}" for _, count, start in placed)
    src = ", ".join(f"{first}:{first + count}" for first, count, _ in placed)
    if m == 1:
        blk.line(f"nisa.dma_copy(dst=x_sb[0:p, {dst}], src=x_v[nl.ds(r0, p), {src}])")
    else:
        blk.comment(f"each input channel's plane feeds its {m} output channels' rows")
        blk.line("for b in range(p):")
        blk.line(f"    for j in range({m}):")
        blk.line(f"        nisa.dma_copy(dst=x_sb[nl.ds((b * {m} + j) * {c}, {c}), {dst}], "
                 f"src=x_v[r0 + b, 0:{c}, {src}])")
    rest = math.prod(d.size_out for d in dims[1:])
    per_tile = PSUM_ELEMS if _pe_taps(spec.taps) else TILE_ELEMS
    block = max(1, min(dims[0].size_out, per_tile // max(rest, 1)))
    args = "x_sb, out_v, w_sb, diag" + (", b_sb" if bias else "")
    emit_grid(blk, [Axis("a", dims[0].size_out, block)],
              f"{tile_fn}({args}, r0, p, {{a0}}, {{asz}})", "affine_range")
    kernel.helpers.append([f"def {fn}(x_v, out_v, w_sb, diag{', b_sb' if bias else ''}, r0, p):",
                           '    """Rows r0..r0+p: load their padded planes once, then every '
                           'output tile."""', *blk.lines])
    return fn


def _window(i: int, k: int, d: Dim, extent: str) -> str:
    """The plane window tap k of spatial dim i reads for output positions base..+extent."""
    base = "a0" if i == 0 else "0"
    start = f"{base} * {d.step} + {k * d.dil}" if d.step > 1 else f"{base} + {k * d.dil}"
    if start.endswith(" + 0"):
        start = start[:-4]
    stop = f"({extent} - 1) * {d.step} + 1" if d.step > 1 else extent
    return f"{start}:{start} + {stop}" + (f":{d.step}" if d.step > 1 else "")


def _emit_tile(kernel: Kernel, spec: ConvSpec, origin: str, bias: bool, out_dtype: str,
               m: int, epi: Epilogue | None = None) -> str:
    fn = kernel.names.fresh("depthwise_tile")
    blk = Block(depth=1)
    dims = spec.dims
    c = spec.cin
    pr = "p" if m == 1 else "p_rows"  # the tile's partitions
    if m > 1:
        blk.line(f"p_rows = p * {c * m}")
    extents = ["asz", *(str(d.size_out) for d in dims[1:])]
    shape = ", ".join(extents)
    blk.line(f"acc = nl.ndarray(({pr}, {shape}), dtype=nl.float32, buffer=nl.sbuf)")
    pe = _pe_taps(spec.taps)
    if pe:
        blk.comment(f"taps 0..{pe - 1} on the PE: acc_ps = sum_t diag(w[:, t]) @ window_t; the "
                    "rest on the Vector Engine: acc = window_t * w[row, t] + acc (acc_ps first)")
        blk.line(f"acc_ps = nl.ndarray(({pr}, {shape}), dtype=nl.float32, buffer=nl.psum)")
    else:
        blk.comment("one tap, on the Scalar Engine: acc = window * w[row, 0]")
    for t, ks in enumerate(itertools.product(*(range(d.taps) for d in dims))):
        window = ", ".join(_window(i, k, d, extents[i]) for i, (k, d) in enumerate(
            zip(ks, dims, strict=True)))
        if t < pe:
            blk.line(f"nisa.nc_matmul(acc_ps, diag[0:{pr}, {t}, 0:{pr}], x_sb[0:{pr}, {window}])")
        elif t == 0:
            blk.line(f"nisa.activation(dst=acc, op=nl.copy, data=x_sb[0:{pr}, {window}], "
                     f"scale=w_sb[0:{pr}, 0:1])")
        else:
            blk.line(f"nisa.scalar_tensor_tensor(dst=acc, data=x_sb[0:{pr}, {window}], "
                     f"op0=nl.multiply, operand0=w_sb[0:{pr}, {t}:{t + 1}], op1=nl.add, "
                     f"operand1={'acc_ps' if t == pe else 'acc'})")
    blk.line(f"res = nl.ndarray(({pr}, {shape}), dtype={nl_dtype(out_dtype)}, "
             "buffer=nl.sbuf)")
    if epi is None:
        bias_arg = f", bias=b_sb[0:{pr}, 0:1]" if bias else ""
        blk.line(f"nisa.activation(dst=res, op=nl.copy, data=acc{bias_arg})")
    else:
        steps = list(epi.steps)
        act = EVICT_ACT[steps.pop(0).op] if steps and steps[0].op in EVICT_ACT else "nl.copy"
        if epi.norm is not None:
            args = f", scale=b_sb[0:{pr}, 0:1], bias=b_sb[0:{pr}, 1:2]"
        else:
            args = f", bias=b_sb[0:{pr}, 0:1]" if bias else ""
        blk.comment(f"copy out: {act}(acc" + (" * scale + shift" if epi.norm is not None else
                                             " + bias" if bias else "")
                    + f") per row on the Scalar Engine ({epi.origins})")
        blk.line(f"nisa.activation(dst=res, op={act}, data=acc{args})")
        emit_steps(blk, steps)
    rest = ", ".join(f"0:{d.size_out}" for d in dims[1:])
    index = "nl.ds(a0, asz)" + (f", {rest}" if rest else "")
    if m == 1:
        blk.line(f"nl.store(out_v[nl.ds(r0, p), {index}], res)")
    else:
        blk.line("for b in range(p):")
        blk.line(f"    for j in range({m}):")
        blk.line(f"        nl.store(out_v[r0 + b, 0:{c}, j, {index}], "
                 f"res[nl.ds((b * {m} + j) * {c}, {c}), {', '.join(':' for _ in dims)}])")
    kernel.helpers.append([f"def {fn}(x_sb, out_v, w_sb, diag{', b_sb' if bias else ''}, r0, p, "
                           "a0, "
                           "asz):",
                           f'    """{origin}: output positions a0..a0+asz (first spatial '
                           'dim) of rows r0..r0+p."""', *blk.lines])
    return fn
