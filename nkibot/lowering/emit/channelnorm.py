"""`x * f(sum_k g(x))` over one middle dim of K <= 128 channels (RMSNorm over channels).

x of shape (A, K, B) is read as its natural [A * K, B] rows: each 128-partition tile holds
128 / K whole groups of K channels, loaded in runs of up to 8 KiB. A matmul against a
[rows, groups] indicator (built once by `nisa.iota`) sums each group's K partitions of
g(x) (one Scalar Engine pass) into a [groups, 512] PSUM tile; f runs on that small tile
(literal steps folded into activation scale/bias); a second matmul against the transposed
indicator broadcasts it back to the group's K partitions, and one Vector pass multiplies.
The general middle-dim layout (the channels on the free side: [32, 128] blocks of 512 B a
partition, each transposed on the PE, instructions of 32 elements) modelled KernelBench 36
at 0.18 of the roofline (model estimate, trn1).
"""

from __future__ import annotations

from nkibot.lowering.emit import fused
from nkibot.lowering.emit.body import ACTIVATIONS
from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.middle import around
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import Resolved

WIDTH = 2048  # columns a load (8 KiB of fp32 per partition)
BANK = 512  # columns a matmul (one 2 KiB PSUM bank of fp32)
PRE = {"square": "nl.square"}


def _plan(res: Resolved, outputs: list[Output]) -> tuple[str, Op, list[Op]] | None:
    """(the input leaf, the channel sum, the per-group ops after it) when the graph fits."""
    ops, leaf = res.ops, None
    if len(outputs) != 1 or len(ops) < 3 or ops[-1].op != "mul":
        return None
    names = [res.target(a.name) for a in ops[-1].args if isinstance(a, Ref)]
    leaves = [n for n in names if n in res.views]
    if len(names) != 2 or len(leaves) != 1 or res.target(outputs[0].name) != ops[-1].name:
        return None
    leaf = leaves[0]
    first = 1 if ops[0].op in PRE else 0
    red = ops[first]
    if red.op != "rsum" or len(red.dims) != 1 or (first and (
            ops[0].args[0] != Ref(leaf) or red.args[0] != Ref(ops[0].name))):
        return None
    if not first and red.args[0] != Ref(leaf):
        return None
    chain, prev = ops[first + 1:-1], red.name
    for op in chain:
        if op.args[0] != Ref(prev) or any(isinstance(a, Ref) for a in op.args[1:]) or not (
                op.op in ACTIVATIONS or op.op in ("add", "sub", "mul")):
            return None
        prev = op.name
    if prev not in names or res.views[leaf].sliced or res.views[leaf].transposed:
        return None
    return res.views[leaf].leaf.name, red, ops[:first + 1] + chain


def emit_channelnorm(res: Resolved, outputs: list[Output], kernel: Kernel) -> bool:
    """Emit the kernel when the graph is `x * f(sum_k g(x))` over a middle dim; else False."""
    if (found := _plan(res, outputs)) is None:
        return False
    k, a, kk, b = around(res, found[1])
    leaf, red, chain = found
    if k == 0 or PMAX % kk or b < BANK:
        return False
    groups = PMAX // kk
    body = kernel.body
    body.line(f"x_v = {leaf}.reshape(({a * kk}, {b}))")
    body.line(f"out_v = {outputs[0].var}.reshape(({a * kk}, {b}))")
    body.comment(f"{red.origin}: ind[r, g] = 1 where row r is one of group g's {kk} channels, "
                 "and its transpose")
    _indicator(body, "ind", (PMAX, groups), f"[[-{kk}, {groups}]], channel_multiplier=1", kk)
    _indicator(body, "ind_t", (groups, PMAX), f"[[1, {PMAX}]], channel_multiplier=-{kk}", kk)
    fn = _emit_tile(kernel, chain, outputs[0].dtype, kk)
    emit_grid(body, [Axis("i", a, groups), Axis("j", b, min(b, WIDTH))],
              f"{fn}(x_v, out_v, ind, ind_t, {{i0}} * {kk}, {{isz}}, {{j0}}, {{jsz}})",
              "affine_range")
    return True


def _indicator(body: Block, name: str, shape: tuple[int, int], pattern: str, k: int) -> None:
    """1.0 where 0 <= row - K * group < K (iota of row - K * group, two compares)."""
    body.line(f"{name} = nl.ndarray({shape}, dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.iota({name}, {pattern})")
    body.line(f"{name}_lo = nl.ndarray({shape}, dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.tensor_scalar(dst={name}_lo, data={name}, op0=nl.greater_equal, "
              "operand0=0.0)")
    body.line(f"nisa.tensor_scalar(dst={name}, data={name}, op0=nl.less, operand0={float(k)!r})")
    body.line(f"nisa.tensor_tensor(dst={name}, data1={name}, data2={name}_lo, op=nl.multiply)")


def _emit_tile(kernel: Kernel, chain: list[Op], out_dtype: str, k: int) -> str:
    fn = kernel.names.fresh("channel_norm_tile")
    blk = Block(depth=1)
    pre = chain[0].op if chain[0].op in PRE else None
    blk.line("p = gp * " + str(k))
    blk.line("xt = nl.load(x_v[nl.ds(r0, p), nl.ds(c0, w)], dtype=nl.float32)")
    blk.line("y = nl.ndarray((p, w), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"for s in range((w + {BANK - 1}) // {BANK}):")
    blk.indent()
    blk.line(f"n = min({BANK}, w - s * {BANK})")
    blk.line(f"xs = xt[0:p, nl.ds(s * {BANK}, n)]")
    data = "xs"
    if pre is not None:
        blk.comment(chain[0].origin or pre)
        blk.line("g = nl.ndarray((p, n), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.activation(dst=g, op={PRE[pre]}, data=xs)")
        data = "g"
    blk.comment("sum each group's channels (partitions) on the PE")
    blk.line("tot = nl.ndarray((gp, n), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"nisa.nc_matmul(tot, ind[0:p, 0:gp], {data})")
    value = _group_chain(blk, [op for op in chain if op.op not in PRE and op.op != "rsum"])
    blk.comment("broadcast back to the group's channels on the PE, then multiply")
    blk.line("back = nl.ndarray((p, n), dtype=nl.float32, buffer=nl.psum)")
    blk.line(f"nisa.nc_matmul(back, ind_t[0:gp, 0:p], {value})")
    blk.line(f"nisa.tensor_tensor(dst=y[0:p, nl.ds(s * {BANK}, n)], data1=xs, data2=back, "
             "op=nl.multiply)")
    blk.dedent()
    value = "y"
    if out_dtype != "float32":
        blk.line(f"y_out = nl.copy(y, dtype={nl_dtype(out_dtype)})")
        value = "y_out"
    blk.line(f"nl.store(out_v[nl.ds(r0, p), nl.ds(c0, w)], {value})")
    kernel.helpers.append([f"def {fn}(x_v, out_v, ind, ind_t, r0, gp, c0, w):",
                           f'    """Groups of {k} channel rows r0.. (gp groups), columns '
                           'c0..c0+w."""', *blk.lines])
    return fn


def _group_chain(blk: Block, ops: list[Op]) -> str:
    """f on the [gp, n] group totals: literal steps fold into the next activation."""
    value, steps = "tot", []
    for i, op in enumerate(ops):
        if op.op in ("add", "sub", "mul"):
            steps.append(fused.Step(op.op, op.args[1], reverse=False))
            continue
        blk.comment(op.origin or op.op)
        form = fused.affine(steps) or (1.0, 0.0)
        bias = ""
        if form[1] != 0.0:
            blk.line(f"bias{i} = nl.full((gp, 1), {form[1]!r}, dtype=nl.float32, "
                     "buffer=nl.sbuf)")
            bias = f", bias=bias{i}"
        var = f"f{i}"
        blk.line(f"{var} = nl.ndarray((gp, n), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.activation(dst={var}, op={ACTIVATIONS[op.op]}, data={value}{bias}, "
                 f"scale={form[0]!r})")
        value, steps = var, []
    if steps or value == "tot":
        form = fused.affine(steps) or (1.0, 0.0)
        blk.line("fz = nl.ndarray((gp, n), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.tensor_scalar(dst=fz, data={value}, op0=nl.multiply, "
                 f"operand0={form[0]!r}, op1=nl.add, operand1={form[1]!r})")
        value = "fz"
    return value
