"""A sum/max/min over one middle dim of an input, with the kept outer rows on the partitions.

`x` of shape (A, K, B) reduced over K (A: the dims before, B: the dims after) is read as
[p <= 128 rows of A, kc, bq] tiles: each partition reads kc * bq contiguous elements (up to
16 KiB per DMA), so no PE transposes and no short runs. The Vector Engine reduces a tile
over kc through a [p, bq, kc] view and folds it into a [p, bq] accumulator; a mean's scale
(or any literal multiply/add after the reduction) is one `tensor_scalar` before the store.
The transposed layout this replaces (the reduced dim on the free side, [cols, rows]
blocks of 512 B per partition each transposed on the PE) was DMA-bound at 0.46 of the
roofline on KernelBench 47/48/49/53 (model estimate, trn1).
"""

from __future__ import annotations

import math

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import Resolved

CHUNK = 4096  # elements per partition of one loaded tile (16 KiB of fp32)
MIN_RUN = 512  # shortest contiguous run (elements) worth this layout: 2 KiB
MIN_ROWS = 64  # fewer kept outer rows would leave most partitions idle
FOLD = {"rsum": "nl.add", "rmax": "nl.maximum", "rmin": "nl.minimum"}
AFTER = {"mul": "nl.multiply", "add": "nl.add", "sub": "nl.subtract"}


def _largest_divisor(n: int, limit: int) -> int:
    return next(d for d in range(min(n, max(limit, 1)), 0, -1) if n % d == 0)


def around(res: Resolved, red: Op) -> tuple[int, int, int, int]:
    """(k, A, K, B) of a one-dim reduction: the dim, the dims before it, its size, after it."""
    shape, k = res.shape(red.args[0].name), red.dims[0]  # type: ignore[union-attr]
    return k, math.prod(shape[:k]), shape[k], math.prod(shape[k + 1:])


def _plan(res: Resolved, outputs: list[Output]) -> tuple[Op, str, list[Op]] | None:
    """(the reduction, its input leaf, the literal ops after it) when the graph is only that."""
    if len(outputs) != 1 or not res.ops or res.ops[0].op not in FOLD:
        return None
    red = res.ops[0]
    src = red.args[0]
    if not isinstance(src, Ref) or res.target(src.name) not in res.views:
        return None
    view = res.views[res.target(src.name)]
    if view.sliced or view.transposed or len(red.dims) != 1:
        return None
    after, prev = [], red.name
    for op in res.ops[1:]:
        args = [a for a in op.args if isinstance(a, Ref)]
        if len(args) != 1 or res.target(args[0].name) != prev:
            return None
        if op.op != "view" and (op.op not in AFTER or len(op.args) != 2
                                or not isinstance(op.args[1], int | float)):
            return None
        after.append(op)
        prev = op.name
    if res.target(outputs[0].name) != prev:
        return None
    return red, view.leaf.name, after


def emit_middle(res: Resolved, outputs: list[Output], kernel: Kernel) -> bool:
    """Emit the kernel when the graph is one middle-dim reduction of an input; else False."""
    if (found := _plan(res, outputs)) is None:
        return False
    red, leaf, after = found
    k, a, kk, b = around(res, red)
    bq = _largest_divisor(b, CHUNK)
    kc = _largest_divisor(kk, CHUNK // bq)
    if k == 0 or b == 1 or a < MIN_ROWS or bq * kc < MIN_RUN or bq < MIN_RUN // 4:
        return False
    fn = _emit_tile(kernel, red, after, kk // kc, kc, bq, outputs[0].dtype)
    body = kernel.body
    body.line(f"x_v = {leaf}.reshape(({a}, {kk}, {b}))")
    body.line(f"out_v = {outputs[0].var}.reshape(({a}, {b}))")
    body.comment(f"{red.origin}: kept rows on the partitions, {kc} x {bq} elements a load")
    emit_grid(body, [Axis("i", a, PMAX), Axis("j", b, bq)],
              f"{fn}(x_v, out_v, {{i0}}, {{isz}}, {{j0}})", "affine_range")
    return True


def _emit_tile(kernel: Kernel, red: Op, after: list[Op], chunks: int, kc: int, bq: int,
               out_dtype: str) -> str:
    fn = kernel.names.fresh("reduce_rows")
    blk = Block(depth=1)
    fold = FOLD[red.op]
    load = f"nl.load(x_v[nl.ds(a0, p), nl.ds({{k0}}, {kc}), nl.ds(b0, {bq})], dtype=nl.float32)"
    reduce = f"nisa.tensor_reduce(dst={{dst}}, op={fold}, data=t.permute((0, 2, 1)), axis=2)"
    blk.line(f"acc = nl.ndarray((p, {bq}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.comment(f"reduce each [p, {kc}, {bq}] tile over its middle axis (a [p, {bq}, {kc}] view)")
    blk.line(f"t = {load.format(k0=0)}")
    blk.line(reduce.format(dst="acc"))
    if chunks > 1:
        blk.line(f"for c in nl.sequential_range({chunks - 1}):")
        blk.line(f"    t = {load.format(k0=f'(c + 1) * {kc}')}")
        blk.line(f"    part = nl.ndarray((p, {bq}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"    {reduce.format(dst='part')}")
        blk.line(f"    nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op={fold})")
    value = "acc"
    for op in after:
        if op.op != "view":
            blk.comment(op.origin or op.op)
            blk.line(f"nisa.tensor_scalar(dst=acc, data=acc, op0={AFTER[op.op]}, "
                     f"operand0={float(op.args[1])!r})")  # type: ignore[arg-type]
    if out_dtype != "float32":
        blk.line(f"res = nl.copy(acc, dtype={nl_dtype(out_dtype)})")
        value = "res"
    blk.line(f"nl.store(out_v[nl.ds(a0, p), nl.ds(b0, {bq})], {value})")
    kernel.helpers.append([f"def {fn}(x_v, out_v, a0, p, b0):",
                           f'    """{red.origin}: rows a0..a0+p, columns b0..b0+{bq}."""',
                           *blk.lines])
    return fn
