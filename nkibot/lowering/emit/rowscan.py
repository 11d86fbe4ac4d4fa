"""Scans along the innermost dim on the Vector Engine: rows on partitions, one instruction.

A scan over the last dim of a [rows, L] tensor keeps the rows on partitions and the
scanned dim on the free side, so every load and store moves contiguous row segments
(the triangular-matmul form must put L on partitions, which for a trailing dim is a
4-byte-run strided DMA: 60x slower by the cost model). `nisa.tensor_tensor_scan` runs
the recurrence `r[i] = data0[i] * r[i-1] + data1[i]` along each partition:
cumsum takes data0 = 1, data1 = x. Chunks of the row run in order with the last column as
the next chunk's `initial` carry. cumprod is `exp(cumsum(log|x|)) * cumprod(sign(x))`: the
plain fp32 product overflows to inf where PyTorch's CPU cumprod, accumulated in double,
comes back into range (KernelBench 90 under the x10 stress trial).

- exclusive: the inclusive chunk shifted one column right, the carry in column 0 (exact);
- reverse (cumsum): chunks from the end back; within a chunk, prefixes restart every
  BLOCK columns and each block's suffix sums are `(D_b - prefix) + x`, D_b the carry plus
  the totals of the blocks from b on (no cancellation at the scale of the row sum);
- masked: `x * mask` on the Vector Engine while the chunk is in SBUF.
"""

from __future__ import annotations

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel
from nkibot.lowering.frontend.ir import Op

CHUNK = 2048  # fp32 columns per tile: 8 KiB runs per partition (DMA efficiency > 90 %)
BLOCK = 64  # reverse scans restart every BLOCK columns (see _emit_reverse_chunk)


def row_scan_fits(op: Op, inner: int) -> bool:
    """The row form covers scans of the innermost dim (reverse cumprod stays on the PE)."""
    return inner == 1 and not (op.attr("kind") == "prod" and (
        op.attr("reverse") or op.attr("exclusive")))


def emit_row_scan(kernel: Kernel, op: Op, x: str, mask: str | None, out: str,
                  rows: int, length: int, out_dtype: str) -> None:
    body = kernel.body
    chunk = min(CHUNK, length)
    prod = op.attr("kind") == "prod"
    body.line(f"x_v = {x}.reshape(({rows}, {length}))")
    if mask is not None:
        body.line(f"m_v = {mask}.reshape(({rows}, {length}))")
    body.line(f"out_v = {out}.reshape(({rows}, {length}))")
    fill = "0.0" if prod else "1.0"
    body.comment(f"{op.origin}: r[i] = data0[i] * r[i-1] + data1[i] along each row "
                 f"({'data0 = x, data1 = 0' if prod else 'data0 = 1, data1 = x'})")
    body.line(f"const_t = nl.full(({PMAX}, {chunk}), {fill}, dtype=nl.float32, "
              "buffer=nl.sbuf)")
    if prod:
        body.comment("cumprod as exp(cumsum(log|x|)) * cumprod(sign(x)): a plain fp32 product "
                     "overflows to inf where PyTorch's CPU cumprod (accumulated in double) "
                     "comes back into range")
        body.line(f"ones_t = nl.full(({PMAX}, {chunk}), 1.0, dtype=nl.float32, "
                  "buffer=nl.sbuf)")
    rows_fn = _emit_rows(kernel, op, mask is not None, length, chunk, out_dtype)
    m = "m_v, " if mask is not None else ""
    consts = _consts(op)
    if op.attr("reverse"):
        body.comment(f"the scan's multiplier: 0 at every {BLOCK}-column block start (restarts)")
        body.line(f"seg_t = nl.full(({PMAX}, {chunk}), 1.0, dtype=nl.float32, buffer=nl.sbuf)")
        body.line(f"nisa.memset(dst=seg_t[0:{PMAX}, 0:{chunk}:{BLOCK}], value=0.0)")
    emit_grid(body, [Axis("r", rows, PMAX)],
              f"{rows_fn}(x_v, {m}out_v, {consts}, {{r0}}, {{rsz}})", "affine_range")


def _emit_rows(kernel: Kernel, op: Op, masked: bool, length: int, chunk: int,
               out_dtype: str) -> str:
    fn = kernel.names.fresh("scan_rows")
    reverse, prod = bool(op.attr("reverse")), op.attr("kind") == "prod"
    chunk_fn = _emit_chunk(kernel, op, masked, out_dtype)
    blk = Block(depth=1)
    blk.line("carry = nl.ndarray((rsz, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.memset(dst=carry, value=0.0)")
    if prod:
        blk.comment("carries: the running sum of log|x| (carry) and the running sign")
        blk.line("sign_c = nl.ndarray((rsz, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.memset(dst=sign_c, value=1.0)")
    m = "m_v, " if masked else ""
    consts = _consts(op)
    carries = "carry, sign_c" if prod else "carry"
    args = f"x_v, {m}out_v, {consts}, {carries}, r0, rsz"
    blk.comment("the carry runs " + ("from the last chunk back" if reverse else
                                     "chunk by chunk") + " (sequential)")
    emit_chunk_loop(blk, chunk_fn, args, length, chunk, reverse)
    kernel.helpers.append([f"def {fn}(x_v, {m}out_v, {consts}, r0, rsz):",
                           '    """Scans rows r0..r0+rsz along the whole scanned dim."""',
                           *blk.lines])
    return fn


def _consts(op: Op) -> str:
    """The constant tiles a row-scan helper takes."""
    if op.attr("kind") == "prod":
        return "const_t, ones_t"
    return "const_t, seg_t" if op.attr("reverse") else "const_t"


def emit_chunk_loop(blk: Block, chunk_fn: str, args: str, length: int, chunk: int,
                    reverse: bool) -> None:
    """Calls `chunk_fn(args, start, size)` over `length` in order (or from the end back):
    a sequential loop over the full chunks, then one call for the remainder."""
    full, rem = divmod(length, chunk)
    if full:
        start = f"{length} - (c + 1) * {chunk}" if reverse else f"c * {chunk}"
        blk.line(f"for c in nl.sequential_range({full}):")
        blk.line(f"    {chunk_fn}({args}, {start}, {chunk})")
    if rem:
        blk.line(f"{chunk_fn}({args}, {0 if reverse else full * chunk}, {rem})")


def _emit_chunk(kernel: Kernel, op: Op, masked: bool, out_dtype: str) -> str:
    fn = kernel.names.fresh("scan_chunk")
    reverse, exclusive = bool(op.attr("reverse")), bool(op.attr("exclusive"))
    prod = op.attr("kind") == "prod"
    blk = Block(depth=1)
    blk.line("x_t = nl.load(x_v[nl.ds(r0, rsz), nl.ds(l0, lsz)], dtype=nl.float32)")
    if masked:
        blk.comment("masked: x * mask before the scan")
        blk.line("m_t = nl.load(m_v[nl.ds(r0, rsz), nl.ds(l0, lsz)], dtype=nl.float32)")
        blk.line("x_t = nl.multiply(x_t, m_t)")
    blk.line("inc = nl.ndarray((rsz, lsz), dtype=nl.float32, buffer=nl.sbuf)")
    if prod:
        res = nl_dtype(out_dtype)
        blk.comment("log|x| (Scalar Engine) summed, sign(x) multiplied, along the row")
        blk.line("ax = nl.ndarray((rsz, lsz), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=ax, op=nl.abs, data=x_t)")
        blk.line("nisa.activation(dst=ax, op=nl.log, data=ax)")
        blk.line("nisa.tensor_tensor_scan(dst=inc, data0=ones_t[0:rsz, 0:lsz], data1=ax, "
                 "initial=carry, op0=nl.multiply, op1=nl.add)")
        blk.line("sg = nl.ndarray((rsz, lsz), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=sg, op=nl.sign, data=x_t)")
        blk.line("nisa.tensor_tensor_scan(dst=sg, data0=sg, data1=const_t[0:rsz, 0:lsz], "
                 "initial=sign_c, op0=nl.multiply, op1=nl.add)")
        blk.line("nisa.tensor_copy(dst=carry, src=inc[0:rsz, lsz - 1:lsz])")
        blk.line("nisa.tensor_copy(dst=sign_c, src=sg[0:rsz, lsz - 1:lsz])")
        blk.line("nisa.activation(dst=inc, op=nl.exp, data=inc)")
        blk.line(f"res = nl.ndarray((rsz, lsz), dtype={res}, buffer=nl.sbuf)")
        blk.line("nisa.tensor_tensor(dst=res, data1=inc, data2=sg, op=nl.multiply)")
        blk.line("nl.store(out_v[nl.ds(r0, rsz), nl.ds(l0, lsz)], res)")
        kernel.helpers.append([f"def {fn}(x_v, out_v, const_t, ones_t, carry, sign_c, r0, rsz, "
                               "l0, lsz):",
                               f'    """{op.origin}: scanned positions l0..l0+lsz of rows '
                               'r0..r0+rsz."""', *blk.lines])
        return fn
    if reverse:
        return _emit_reverse_chunk(kernel, op, blk, masked, exclusive, out_dtype, fn)
    blk.line("nisa.tensor_tensor_scan(dst=inc, data0=const_t[0:rsz, 0:lsz], data1=x_t, "
             "initial=carry, op0=nl.multiply, op1=nl.add)")
    res = nl_dtype(out_dtype)
    blk.line(f"res = nl.ndarray((rsz, lsz), dtype={res}, buffer=nl.sbuf)")
    if exclusive:
        blk.comment("exclusive: the inclusive prefix one column right, the carry first")
        blk.line("nisa.tensor_copy(dst=res[0:rsz, 0:1], src=carry)")
        blk.line("if lsz > 1:")
        blk.line("    nisa.tensor_copy(dst=res[0:rsz, 1:lsz], src=inc[0:rsz, 0:lsz - 1])")
        blk.line("nisa.tensor_copy(dst=carry, src=inc[0:rsz, lsz - 1:lsz])")
    else:
        blk.line("nisa.tensor_copy(dst=res, src=inc)")
        blk.line("nisa.tensor_copy(dst=carry, src=inc[0:rsz, lsz - 1:lsz])")
    return _finish_chunk(kernel, op, blk, masked, fn, "const_t", "")


def _finish_chunk(kernel: Kernel, op: Op, blk: Block, masked: bool, fn: str, consts: str,
                  note: str) -> str:
    """Store the chunk's result and register the helper `fn`."""
    blk.line("nl.store(out_v[nl.ds(r0, rsz), nl.ds(l0, lsz)], res)")
    m = "m_v, " if masked else ""
    kernel.helpers.append([f"def {fn}(x_v, {m}out_v, {consts}, carry, r0, rsz, l0, lsz):",
                           f'    """{op.origin}: scanned positions l0..l0+lsz of rows '
                           f'r0..r0+rsz{note}."""', *blk.lines])
    return fn


def _emit_reverse_chunk(kernel: Kernel, op: Op, blk: Block, masked: bool, exclusive: bool,
                        out_dtype: str, fn: str) -> str:
    """Suffix sums of one chunk from per-block prefixes: no cancellation at the row's scale.

    `total - prefix` over a whole row loses the prefix's accumulated rounding (about
    eps * row sum * sqrt(L)) against suffixes as small as one element (KernelBench 91 at
    x10: 0.057 off). Here the scan restarts every BLOCK columns (`seg_t` is 0 at block
    starts), so a block's prefixes are exact to its own total; each block's suffix start
    D_b = carry + the sum of the block totals from b on, and one `scalar_tensor_tensor`
    per block gives `(D_b - inc) + x` (`D_b - inc` for an exclusive scan).
    """
    blk.comment(f"prefix sums restarting every {BLOCK} columns (seg_t is 0 at block starts)")
    blk.line("nisa.tensor_tensor_scan(dst=inc, data0=seg_t[0:rsz, 0:lsz], data1=x_t, "
             "initial=0.0, op0=nl.multiply, op1=nl.add)")
    blk.line(f"nb = (lsz + {BLOCK - 1}) // {BLOCK}")
    blk.comment("block totals (the last column of each block), their prefix, and "
                "D_b = carry + sum of totals from block b on")
    blk.line("tot = nl.ndarray((rsz, nb), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"if lsz >= {BLOCK}:")
    blk.line(f"    nisa.tensor_copy(dst=tot[0:rsz, 0:lsz // {BLOCK}], "
             f"src=inc[0:rsz, {BLOCK - 1}:lsz:{BLOCK}])")
    blk.line(f"if lsz % {BLOCK}:")
    blk.line("    nisa.tensor_copy(dst=tot[0:rsz, nb - 1:nb], src=inc[0:rsz, lsz - 1:lsz])")
    blk.line("pre = nl.ndarray((rsz, nb), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_tensor_scan(dst=pre, data0=const_t[0:rsz, 0:nb], data1=tot, "
             "initial=0.0, op0=nl.multiply, op1=nl.add)")
    blk.line("nisa.tensor_tensor(dst=carry, data1=carry, data2=pre[0:rsz, nb - 1:nb], op=nl.add)")
    blk.line("d_b = nl.ndarray((rsz, nb), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.tensor_tensor(dst=d_b, data1=pre, data2=tot, op=nl.subtract)")
    blk.line("nisa.tensor_scalar(dst=d_b, data=d_b, op0=nl.subtract, operand0=carry, "
             "reverse0=True)")
    blk.line(f"res = nl.ndarray((rsz, lsz), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    blk.comment("per block: D_b - prefix (+ x unless exclusive)")
    blk.line("for b in nl.affine_range(nb):")
    blk.line(f"    w = min({BLOCK}, lsz - b * {BLOCK})")
    cols = f"nl.ds(b * {BLOCK}, w)"
    if exclusive:
        blk.line(f"    nisa.tensor_scalar(dst=res[0:rsz, {cols}], data=inc[0:rsz, {cols}], "
                 "op0=nl.subtract, operand0=d_b[0:rsz, nl.ds(b, 1)], reverse0=True)")
    else:
        blk.line(f"    nisa.scalar_tensor_tensor(dst=res[0:rsz, {cols}], data=inc[0:rsz, {cols}], "
                 "op0=nl.subtract, operand0=d_b[0:rsz, nl.ds(b, 1)], reverse0=True, "
                 f"op1=nl.add, operand1=x_t[0:rsz, {cols}])")
    return _finish_chunk(kernel, op, blk, masked, fn, "const_t, seg_t", " (suffix sums)")
