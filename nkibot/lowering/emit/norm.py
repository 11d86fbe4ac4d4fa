"""Normalisation over blocks too long for one row: LayerNorm over several dims, GroupNorm.

Each normalised block (a LayerNorm's trailing dims, or one group's channels x positions)
is held in SBUF as an [A, B] tile over A <= 128 partitions. Per-partition sums are totalled
across the partitions by one matmul against an [A, A] block of ones, which also broadcasts
the total back to every partition. Statistics (schedule/normstats picks by the cost model's
figures): two passes over the resident tile (the mean, then the centred variance), or one
(`bn_stats`/`bn_aggr` per partition, combined by Chan's parallel variance); neither has
E[x^2] - mean^2 cancellation. The affine weight is a full [A, B] tile for LayerNorm (loaded
once) and one value per partition (channel) for GroupNorm, folded into the output's scale
and shift.
"""

from __future__ import annotations

import math

from nkibot.lowering.emit import groupnorm, rowstats
from nkibot.lowering.emit.builder import PMAX, Block, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule import normstats
from nkibot.lowering.schedule.layout import LayoutError, Resolved
from nkibot.sim.cost.quick import SBUF_BYTES

BLOCK_BUDGET = SBUF_BYTES // 4  # bytes per partition for one fp32 [A, B] tile (3 live at once)


def _leaf(res: Resolved, arg: object) -> str:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError("normalisation of a computed value")
    return res.views[res.target(arg.name)].leaf.name


#: The PyTorch module each kind of block normalisation comes from (the user's words).
NORM_NAMES = {"batch": "BatchNorm", "batch_train": "BatchNorm", "group": "GroupNorm",
              "layer": "LayerNorm"}


def norm_name(ops: list[Op]) -> str:
    """`BatchNorm (self.bn)`: the normalisation among `ops` as the user wrote it."""
    for op in ops:
        kind = op.attr("kind")
        if isinstance(kind, str) and kind in NORM_NAMES:
            return NORM_NAMES[kind] + (f" ({op.origin})" if op.origin else "")
    return "a LayerNorm, GroupNorm or BatchNorm"


def _split(count: int) -> tuple[int, int]:
    """(A, B) with A * B = count, A the largest divisor <= 128."""
    a = next(d for d in range(min(PMAX, count), 0, -1) if count % d == 0)
    return a, count // a


def emit_blocknorm(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1:
        raise LayoutError(f"{norm_name(res.ops)} together with other operations in one "
                          "kernel: convert the normalisation and the rest as separate modules")
    op = res.ops[0]
    x = _leaf(res, op.args[0])
    if op.attr("kind") == "batch":
        if op.shape[1] > PMAX:
            raise LayoutError(f"BatchNorm over {op.shape[1]} channels (over {PMAX}): "
                              "written as elementwise ops instead")
        groupnorm.emit_batchnorm(kernel, op, x, [_leaf(res, arg) for arg in op.args[1:]],
                                 outputs[0])
        return
    if op.attr("kind") == "batch_train":
        n, c = op.shape[0], op.shape[1]
        if not groupnorm.fits_batch_stats(n, c, math.prod(op.shape[2:])):
            raise LayoutError(f"BatchNorm batch statistics over {c} channels of "
                              f"{math.prod(op.shape[2:])} positions: over {PMAX} channels "
                              "or rows over the SBUF budget (call model.eval() to use the "
                              "running statistics)")
        groupnorm.emit_batchnorm_train(kernel, op, x, [_leaf(res, arg) for arg in op.args[1:]],
                                       outputs[0])
        return
    shape = op.shape
    group = op.attr("kind") == "group"
    if group:
        groups = int(str(op.attr("groups")))
        outer, (a, b) = shape[0] * groups, (shape[1] // groups, math.prod(shape[2:]))
        if a > PMAX:
            raise LayoutError(f"GroupNorm with {a} channels per group (over {PMAX})")
    else:
        count = int(str(op.attr("count")))
        outer, (a, b) = math.prod(shape[:len(shape) - count]), _split(
            math.prod(shape[len(shape) - count:]))
    if group and math.prod(shape[2:]) == 1:
        raise LayoutError(f"{norm_name([op])} over [N, C]: its groups are runs along each "
                          "row, written out as one segnorm (rewrite._segment_ops)")
    if group and groupnorm.fits_long(shape[1], groups, math.prod(shape[2:])):
        groupnorm.emit_groupnorm(kernel, op, x, [_leaf(res, arg) for arg in op.args[1:]],
                                 outputs[0])
        return
    if group and rows_faster(shape, groups, len(op.args) - 1):
        raise LayoutError(f"{norm_name([op])}: {outer} blocks of [{a}, {b}] are modelled "
                          "slower than one row a group (written out as row reductions)")
    if b * 4 > BLOCK_BUDGET:
        raise LayoutError(f"normalised blocks of {a} x {b} elements exceed the SBUF budget")
    params = [_leaf(res, arg) for arg in op.args[1:]]
    body = kernel.body
    body.line(f"x_v = {x}.reshape(({outer}, {a}, {b}))")
    body.line(f"out_v = {outputs[0].var}.reshape(({outer}, {a}, {b}))")
    body.comment(f"{op.origin}: [{a}, {a}] ones total the per-partition sums and broadcast them")
    body.line(f"ones = nl.full(({a}, {a}), 1.0, dtype=nl.float32, buffer=nl.sbuf)")
    names = []
    for i, p in enumerate(params):
        name = ("w_t", "b_t")[i]
        names.append(name)
        if group:
            body.line(f"{name}_v = {p}.reshape(({groups}, {a}, 1))")
        else:
            body.comment(f"{'weight' if i == 0 else 'bias'}: one [{a}, {b}] tile for every block")
            body.line(f"{name} = nl.load({p}.reshape(({a}, {b})), dtype=nl.float32)")
    fn = _emit_block(kernel, op, a, b, group, len(params), outputs[0].dtype)
    args = ", ".join(["x_v", "out_v", "ones", *(f"{n}_v" if group else n for n in names)])
    body.line(f"for o in nl.affine_range({outer}):")
    body.line(f"    {fn}({args}, o)")


def rows_faster(shape: tuple[int, ...], groups: int, affine: int) -> bool:
    """Whether a GroupNorm is modelled faster written out (rewrite.expand_norms: one row a
    group, (N x G) rows of C / G x H x W on the partitions, mean and variance from bn_stats
    through rowstats, the weights a stage of their own) than as N x G blocks here, one at a
    time (schedule/normstats: blocks_ns against rows_ns). GroupNorm(512, 8192) after a
    Linear is 64 x 512 blocks of [16, 1]: 31829 us as blocks, 291 us written out (64 x 8192,
    model estimate trn1)."""
    n, c, hw = shape[0], shape[1], math.prod(shape[2:])
    forms = block_forms(hw, True, affine)
    blocks = normstats.blocks_ns(n * groups, forms[normstats.choose(forms)])
    return normstats.rows_ns(n * groups, c // groups * hw, affine) < blocks


def block_forms(b: int, group: bool, affine: int) -> dict[str, list[normstats.Step]]:
    """Each statistics form's instructions for one [A, B] block (schedule/normstats)."""
    Step, cols = normstats.Step, normstats.column_steps
    if not group and affine:  # LayerNorm's [A, B] weights: ((x - mean) * w) * rstd (+ b)
        out = [Step("vector", b, 2), Step("vector", b, 2 if affine == 2 else 1)]
        folded = out
    else:  # x * rstd - mean * rstd, then GroupNorm's per-channel weights: one pass each
        out = [Step("scalar", b), *cols("vector", 2), *cols("scalar", 1)]
        out += [Step("vector", b)] * affine
        # one pass: the weights fold into the scale and shift columns
        folded = [Step("scalar", b), *cols("vector", 2 + affine), *cols("scalar", 1)]
    two = [Step("scalar", b), Step("scalar", b), *cols("vector", 1)]
    return {"two_pass": two + out, "one_pass": normstats.one_pass_stats(b) + folded}


def _emit_block(kernel: Kernel, op: Op, a: int, b: int, group: bool, affine: int,
                out_dtype: str) -> str:
    fn = kernel.names.fresh("norm_block")
    blk = Block(depth=1)
    eps = float(str(op.attr("eps")))
    form = normstats.choose(block_forms(b, group, affine))
    names = ("w_t", "b_t")[:affine]
    blk.line("xt = nl.load(x_v[o], dtype=nl.float32)")
    if form == "one_pass":
        if names and not group:
            blk.line(f"work = nl.ndarray(({a}, {b}), dtype=nl.float32, buffer=nl.sbuf)")
        rowstats.emit_group_moments(blk, "xt", str(a), b, "ones", a)
        inv = 1.0 / a
    else:
        inv = 1.0 / (a * b)
        blk.comment("row sums and centred squares ride on Scalar Engine passes (reduce_res); "
                    "the [A, A] ones matmul totals them across partitions")
        blk.line(f"work = nl.ndarray(({a}, {b}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"part = nl.ndarray(({a}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=work, op=nl.copy, data=xt, reduce_op=nl.add, "
                 "reduce_res=part)")
        blk.line(f"tot = nl.ndarray(({a}, 1), dtype=nl.float32, buffer=nl.psum)")
        blk.line("nisa.nc_matmul(tot, ones, part)")
        blk.line(f"neg_mean = nl.multiply(tot, {-inv!r})")
        blk.line(f"sq_part = nl.ndarray(({a}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=work, op=nl.square, data=xt, bias=neg_mean, "
                 "reduce_op=nl.add, reduce_res=sq_part)")
        blk.line(f"var = nl.ndarray(({a}, 1), dtype=nl.float32, buffer=nl.psum)")
        blk.line("nisa.nc_matmul(var, ones, sq_part)")
    blk.line(f"rstd = nl.rsqrt(nl.add(nl.multiply(var, {inv!r}), {eps!r}))")
    blk.line(f"y = nl.ndarray(({a}, {b}), dtype=nl.float32, buffer=nl.sbuf)")
    groups = int(str(op.attr("groups"))) if group else 0
    if group and names and form == "one_pass":
        for name in names:
            blk.line(f"{name} = nl.load({name}_v[o % {groups}], dtype=nl.float32)")
        blk.comment("one affine value per channel (partition) of group o % groups, folded "
                    "into the scale and shift")
        blk.line("nisa.tensor_tensor(dst=rstd, data1=rstd, data2=w_t, op=nl.multiply)")
        blk.comment("y = (x - mean) * s + b = x * s + (b - mean * s): one Scalar Engine pass")
        blk.line(f"shift = nl.ndarray(({a}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        if len(names) == 2:
            blk.line("nisa.scalar_tensor_tensor(dst=shift, data=neg_mean, op0=nl.multiply, "
                     "operand0=rstd, op1=nl.add, operand1=b_t)")
        else:
            blk.line("nisa.tensor_tensor(dst=shift, data1=neg_mean, data2=rstd, op=nl.multiply)")
        blk.line("nisa.activation(dst=y, op=nl.copy, data=xt, bias=shift, scale=rstd)")
    elif group or not names:
        blk.comment("y = (x - mean) * rstd = x * rstd + (-mean * rstd): one Scalar Engine pass")
        blk.line("nisa.activation(dst=y, op=nl.copy, data=xt, bias=nl.multiply(neg_mean, rstd), "
                 "scale=rstd)")
        for name, fold in zip(names if group else (), ("nl.multiply", "nl.add"), strict=False):
            blk.comment("one affine value per channel (partition) of group o % groups")
            blk.line(f"{name} = nl.load({name}_v[o % {groups}], dtype=nl.float32)")
            blk.line(f"nisa.tensor_scalar(dst=y, data=y, op0={fold}, operand0={name})")
    if names and not group:
        blk.comment("((x - mean) * w) * rstd + b: two Vector Engine passes")
        blk.line("nisa.scalar_tensor_tensor(dst=work, data=xt, op0=nl.add, operand0=neg_mean, "
                 "op1=nl.multiply, operand1=w_t)")
        if affine == 2:
            blk.line("nisa.scalar_tensor_tensor(dst=y, data=work, op0=nl.multiply, "
                     "operand0=rstd, op1=nl.add, operand1=b_t)")
        else:
            blk.line("nisa.tensor_scalar(dst=y, data=work, op0=nl.multiply, operand0=rstd)")
    if out_dtype != "float32":
        blk.line(f"y = nl.copy(y, dtype={nl_dtype(out_dtype)})")
    blk.line("nl.store(out_v[o], y)")
    params = ", ".join(["x_v", "out_v", "ones", *(f"{n}_v" if group else n for n in names)])
    kernel.helpers.append([f"def {fn}({params}, o):",
                           f'    """{op.origin}: normalise block o ([{a}, {b}] resident in '
                           f'SBUF; statistics: {form.replace("_", " ")})."""', *blk.lines])
    return fn
