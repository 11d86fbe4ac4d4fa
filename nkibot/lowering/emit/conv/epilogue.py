"""A convolution's epilogue on its PSUM eviction: an eval BatchNorm folded into a per-channel
(scale, shift), activations, clamps by literals and one residual add (`Epilogue`), parsed
from a conv group and written by the conv and depthwise emitters."""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.lowering.emit.builder import PMAX, Block
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import LayoutError, Resolved


def leaf_arg(res: Resolved, arg: object, what: str) -> str:
    """The kernel argument a conv operand (or a BatchNorm statistic) is, whole."""
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"convolution {what} is computed; only inputs and parameters are "
                          "lowered")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced or view.shape != view.leaf.shape:
        raise LayoutError(f"convolution {what} is a view of an input")
    return view.leaf.name


#: Activations the Scalar Engine applies on the PSUM -> SBUF eviction (op -> nl function).
EVICT_ACT = {"relu": "nl.relu", "sigmoid": "nl.sigmoid", "tanh": "nl.tanh", "silu": "nl.silu"}


@dataclass(frozen=True)
class Epilogue:
    """Work a conv's PSUM eviction does: an eval BatchNorm folded into a per-channel scale
    and shift, then `steps` in order, each an activation function (op.op in EVICT_ACT), a
    clamp by a literal (maximum / minimum) or the add of a residual of the output's shape
    (`residual`, a kernel argument or an earlier stage's tensor)."""

    norm: Op | None
    steps: tuple[Op, ...]
    residual: str | None = None

    @property
    def origins(self) -> str:
        ops = ([self.norm] if self.norm is not None else []) + list(self.steps)
        return ", ".join(dict.fromkeys(op.origin or op.op for op in ops))


def _pointwise_step(op: Op, refs: list[str]) -> bool:
    """An activation function, or a clamp by a literal (maximum / minimum)."""
    if op.op in EVICT_ACT:
        return len(op.args) == 1
    return op.op in ("maximum", "minimum") and len(refs) == 1 and isinstance(
        op.args[1], int | float) and not isinstance(op.args[1], bool)


def find_epilogue(res: Resolved, conv: Op, outputs: list[Output]) -> Epilogue | None:
    """conv -> [eval BatchNorm of it] -> activations, clamps, one residual add; the last op
    the group's one output."""
    rest = [op for op in res.ops if op is not conv]
    if not rest or len(outputs) != 1:
        return None
    prev, norm, residual = conv.name, None, None
    steps: list[Op] = []
    for op in rest:
        refs = [res.target(a.name) for a in op.args if isinstance(a, Ref)]
        if prev not in refs:
            return None
        if not steps and norm is None and op.op == "blocknorm" and op.attr("kind") == "batch":
            if refs[0] != prev:
                return None
            norm = op
        elif _pointwise_step(op, refs):
            steps.append(op)
        elif op.op == "add" and residual is None and len(refs) == 2:
            other = refs[1] if refs[0] == prev else refs[0]
            view = res.views.get(other)
            if view is None or view.transposed or view.sliced or view.shape != op.shape or (
                    view.shape != view.leaf.shape or op.shape != conv.shape):
                return None
            residual = view.leaf.name
            steps.append(op)
        else:
            return None
        prev = op.name
    if res.target(outputs[0].name) != prev:
        return None
    return Epilogue(norm, tuple(steps), residual)


def emit_folded_norm(res: Resolved, kernel: Kernel, norm: Op, conv_bias: str | None,
                     cout: int, origin: str) -> str:
    """The [Cout, 2] HBM table of (scale, shift) per output channel that folds an eval
    BatchNorm (and the conv's bias) into the eviction: scale = w / sqrt(var + eps), shift =
    (conv bias - mean) * scale + b. Computed once, 128 channels a tile."""
    mean, var, *affine = (leaf_arg(res, a, "BatchNorm statistic") for a in norm.args[1:])
    eps = float(str(norm.attr("eps")))
    body, names = kernel.body, kernel.names
    table = names.fresh("evict_hbm")
    fn = names.fresh("fold_norm")
    cols = [("mean_c", mean), ("var_c", var)] + (
        [("w_c", affine[0]), ("b_c", affine[1])] if affine else []) + (
        [("cb_c", conv_bias)] if conv_bias is not None else [])
    blk = Block(depth=1)
    for var_name, leaf in cols:
        blk.line(f"{var_name} = nl.load({leaf}.reshape(({cout}, 1))[nl.ds(c0, csz), 0:1], "
                 "dtype=nl.float32)")
    blk.line("pair = nl.ndarray((csz, 2), dtype=nl.float32, buffer=nl.sbuf)")
    blk.comment(f"scale = {'w / ' if affine else '1 / '}sqrt(var + eps)")
    blk.line(f"nisa.tensor_scalar(dst=pair[0:csz, 0:1], data=var_c, op0=nl.add, "
             f"operand0={eps!r})")
    blk.line("nisa.activation(dst=pair[0:csz, 0:1], op=nl.rsqrt, data=pair[0:csz, 0:1])")
    if affine:
        blk.line("nisa.tensor_tensor(dst=pair[0:csz, 0:1], data1=pair[0:csz, 0:1], data2=w_c, "
                 "op=nl.multiply)")
    blk.comment("shift = (conv bias - mean) * scale" + (" + b" if affine else ""))
    if conv_bias is not None:
        blk.line("nisa.tensor_tensor(dst=mean_c, data1=cb_c, data2=mean_c, op=nl.subtract)")
    else:
        blk.line("nisa.tensor_scalar(dst=mean_c, data=mean_c, op0=nl.multiply, operand0=-1.0)")
    if affine:
        blk.line("nisa.scalar_tensor_tensor(dst=pair[0:csz, 1:2], data=mean_c, op0=nl.multiply, "
                 "operand0=pair[0:csz, 0:1], op1=nl.add, operand1=b_c)")
    else:
        blk.line("nisa.tensor_tensor(dst=pair[0:csz, 1:2], data1=mean_c, data2=pair[0:csz, 0:1], "
                 "op=nl.multiply)")
    blk.line("nisa.dma_copy(dst=table[nl.ds(c0, csz), 0:2], src=pair)")
    args = ", ".join(leaf for _, leaf in cols)
    kernel.helpers.append([f"def {fn}({args}, table, c0, csz):",
                           f'    """{norm.origin} folded into {origin}: (scale, shift) of '
                           'channels c0..c0+csz."""', *blk.lines])
    body.comment(f"{norm.origin} (running statistics) folded into {origin}'s PSUM eviction: "
                 "a (scale, shift) pair per output channel, computed once")
    body.line(f"{table} = nl.ndarray(({cout}, 2), dtype=nl.float32, buffer=nl.hbm)")
    for c0 in range(0, cout, PMAX):
        body.line(f"{fn}({args}, {table}, {c0}, {min(PMAX, cout - c0)})")
    return table

def emit_steps(blk: Block, steps: list[Op], residual: str = "") -> None:
    """The epilogue's steps after the eviction, on the SBUF tile `res` (`residual`: the
    residual's tile, indexed)."""
    while steps:
        op = steps.pop(0)
        if op.op in EVICT_ACT:
            blk.line(f"nisa.activation(dst=res, op={EVICT_ACT[op.op]}, data=res)")
        elif op.op == "add":
            blk.line(f"r_t = nl.load({residual}, dtype=nl.float32)")
            blk.comment(f"{op.origin}: the residual, on the Vector Engine")
            blk.line("nisa.tensor_tensor(dst=res, data1=res, data2=r_t, op=nl.add)")
        else:
            clamp = f"op0=nl.{op.op}, operand0={float(str(op.args[1]))!r}"
            if steps and steps[0].op in ("maximum", "minimum") and steps[0].op != op.op:
                nxt = steps.pop(0)
                clamp += f", op1=nl.{nxt.op}, operand1={float(str(nxt.args[1]))!r}"
            blk.comment(f"{op.origin}: a clamp on the Vector Engine")
            blk.line(f"nisa.tensor_scalar(dst=res, data=res, {clamp})")
