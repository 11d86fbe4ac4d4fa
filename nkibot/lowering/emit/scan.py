"""Scans (cumsum, cumprod; reverse, exclusive, masked) as triangular matmuls on the PE.

The scanned dim goes on the partitions in chunks of 128 and up to 512 independent scans
on the free side. Within a chunk, `out = T.T @ x` with T the 128 x 128 triangle of ones
(`i <= j`; `i >= j` reversed; strict when exclusive), built once with `nisa.iota`. The
running total of earlier chunks (a [1, F] carry) is added by a second matmul into the
same PSUM tile against a row of ones, and the carry grows by `ones.T @ x`. A cumulative
product scans `log|x|` and the count of negative factors the same way, then takes
`exp(sum) * (-1) ** count`.
"""

from __future__ import annotations

import math

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowscan import emit_chunk_loop, emit_row_scan, row_scan_fits
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import LayoutError, Resolved

NMAX = 512
LOG_ZERO = "-1.0e30"  # log|0|: finite, so the 0 entries of the triangle never make NaN
#: The triangle's test on iota = j - i (column minus partition), by (reverse, exclusive).
TRIANGLE = {(False, False): "nl.greater_equal", (True, False): "nl.less_equal",
            (False, True): "nl.greater", (True, True): "nl.less"}


def _leaf(res: Resolved, arg: object) -> tuple[str, tuple[int, ...]]:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError("a scan of a computed value; scans of inputs (optionally masked) "
                          "are lowered")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced:
        raise LayoutError("a scan of a transposed or sliced input")
    return view.leaf.name, view.shape


def _view(tensor: str, outer: int, length: int, inner: int) -> str:
    """[G, L, F]: the scanned dim L in the middle, the free side F contiguous if it can be."""
    if inner == 1:
        return f"{tensor}.reshape((1, {outer}, {length})).permute((0, 2, 1))"
    return f"{tensor}.reshape(({outer}, {length}, {inner}))"


def emit_scan(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1:
        raise LayoutError("a scan with other ops in the graph (a lone, optionally masked, "
                          "scan is lowered)")
    op = res.ops[0]
    if op.attr("narrowed"):
        raise LayoutError("a scan of a narrowed input that is not an exclusive scan")
    if op.attr("flipped"):
        raise LayoutError("a scan of a flipped input that is not flipped back")
    x, shape = _leaf(res, op.args[0])
    mask = _leaf(res, op.args[1])[0] if len(op.args) > 1 else None
    dim = int(str(op.attr("dim")))
    outer, length, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    if row_scan_fits(op, inner):
        emit_row_scan(kernel, op, x, mask, outputs[0].var, outer, length, outputs[0].dtype)
        return
    groups, free = (1, outer) if inner == 1 else (outer, inner)
    reverse, exclusive = bool(op.attr("reverse")), bool(op.attr("exclusive"))
    prod = op.attr("kind") == "prod"
    body = kernel.body
    body.line(f"x_v = {_view(x, outer, length, inner)}")
    if mask is not None:
        body.line(f"m_v = {_view(mask, outer, length, inner)}")
    body.line(f"out_v = {_view(outputs[0].var, outer, length, inner)}")
    body.comment(f"{op.origin}: triangle T[i, j] = 1 where {TRIANGLE[(reverse, exclusive)]}"
                 "(j - i, 0), and ones for the carry")
    body.line(f"iota_t = nl.ndarray(({PMAX}, {PMAX}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.iota(iota_t, [[1, {PMAX}]], offset=0, channel_multiplier=-1)")
    body.line(f"tri = {TRIANGLE[(reverse, exclusive)]}(iota_t, 0.0, dtype=nl.float32)")
    body.line(f"ones = nl.full(({PMAX}, {PMAX}), 1.0, dtype=nl.float32, buffer=nl.sbuf)")
    chunk_fn = _emit_chunk(kernel, op, mask is not None, prod, outputs[0].dtype)
    cols_fn = _emit_cols(kernel, length, reverse, prod, chunk_fn, mask is not None)
    m = "m_v, " if mask is not None else ""
    body.line(f"for g in nl.affine_range({groups}):")
    body.indent()
    emit_grid(body, [Axis("f", free, NMAX)],
              f"{cols_fn}(x_v, {m}out_v, tri, ones, g, {{f0}}, {{fsz}})", "affine_range")
    body.dedent()


def _emit_cols(kernel: Kernel, length: int, reverse: bool, prod: bool, chunk_fn: str,
               masked: bool) -> str:
    fn = kernel.names.fresh("scan_cols")
    blk = Block(depth=1)
    carries = ["carry", "count"] if prod else ["carry"]
    for c in carries:
        blk.line(f"{c} = nl.ndarray((1, fsz), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.memset(dst={c}, value=0.0)")
    m = "m_v, " if masked else ""
    args = f"x_v, {m}out_v, tri, ones, {', '.join(carries)}, g, f0, fsz"
    order = "from the last chunk back" if reverse else "chunk by chunk"
    blk.comment(f"the carry runs {order}: chunks in order (sequential)")
    emit_chunk_loop(blk, chunk_fn, args, length, PMAX, reverse)
    kernel.helpers.append([f"def {fn}(x_v, {m}out_v, tri, ones, g, f0, fsz):",
                           '    """Scans f0..f0+fsz of group g over the whole scanned dim."""',
                           *blk.lines])
    return fn


def _scan_into(blk: Block, acc: str, data: str, carry: str) -> None:
    blk.line(f"{acc} = nl.ndarray((lsz, fsz), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"nisa.nc_matmul({acc}, tri[0:lsz, 0:lsz], {data})")
    blk.line(f"nisa.nc_matmul({acc}, ones[0:1, 0:lsz], {carry})")


def _grow(blk: Block, total: str, data: str, carry: str) -> None:
    blk.line(f"{total} = nl.ndarray((1, fsz), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"nisa.nc_matmul({total}, ones[0:lsz, 0:1], {data})")
    blk.line(f"nisa.tensor_tensor(dst={carry}, data1={carry}, data2={total}, op=nl.add)")


def _emit_chunk(kernel: Kernel, op: Op, masked: bool, prod: bool, out_dtype: str) -> str:
    fn = kernel.names.fresh("scan_chunk")
    blk = Block(depth=1)
    blk.line("x_t = nl.load(x_v[g, nl.ds(l0, lsz), nl.ds(f0, fsz)], dtype=nl.float32)")
    if masked:
        blk.comment("masked: x * mask before the scan")
        blk.line("m_t = nl.load(m_v[g, nl.ds(l0, lsz), nl.ds(f0, fsz)], dtype=nl.float32)")
        blk.line("x_t = nl.multiply(x_t, m_t)")
    res = nl_dtype(out_dtype)
    if prod:
        blk.comment("cumprod = exp(cumsum(log|x|)) * (-1) ** cumsum(x < 0)")
        blk.line(f"lg = nl.maximum(nl.log(nl.abs(x_t)), {LOG_ZERO})")
        blk.line("neg = nl.less(x_t, 0.0, dtype=nl.float32)")
        _scan_into(blk, "acc", "lg", "carry")
        _scan_into(blk, "acc_n", "neg", "count")
        blk.line("cnt = nl.copy(acc_n, dtype=nl.float32)")
        blk.line("odd = nl.subtract(cnt, nl.multiply(nl.floor(nl.multiply(cnt, 0.5)), 2.0))")
        blk.line("sign = nl.add(nl.multiply(odd, -2.0), 1.0)")
        blk.line(f"res = nl.multiply(nl.exp(acc), sign, dtype={res})")
        blk.line("nl.store(out_v[g, nl.ds(l0, lsz), nl.ds(f0, fsz)], res)")
        _grow(blk, "tot", "lg", "carry")
        _grow(blk, "tot_n", "neg", "count")
    else:
        blk.comment("prefix within the chunk, plus the carry of the chunks before it")
        _scan_into(blk, "acc", "x_t", "carry")
        blk.line(f"res = nl.ndarray((lsz, fsz), dtype={res}, buffer=nl.sbuf)")
        blk.line("nisa.tensor_copy(dst=res, src=acc)")
        blk.line("nl.store(out_v[g, nl.ds(l0, lsz), nl.ds(f0, fsz)], res)")
        _grow(blk, "tot", "x_t", "carry")
    m = "m_v, " if masked else ""
    carries = "carry, count" if prod else "carry"
    kernel.helpers.append([f"def {fn}(x_v, {m}out_v, tri, ones, {carries}, g, f0, fsz, l0, lsz):",
                           f'    """{op.origin}: scanned positions l0..l0+lsz of scans '
                           'f0..f0+fsz."""', *blk.lines])
    return fn
