"""The affine head of a plain conv's tail, folded into its eviction's (scale, shift).

A plain conv evicts PSUM with one Scalar Engine `activation(data * scale + shift)` per
tile (conv.py), the shift its bias. When its tail starts with adds, subtracts, multiplies
or divides by a literal or by a per-channel parameter (KernelBench's "Subtract",
"Multiply", "Scaling", "BiasAdd"), those ops are that same affine map per channel: a
[Cout, 2] table of (scale, shift) computed once (as a folded BatchNorm's is,
epilogue.emit_folded_norm) does them on the eviction. The tail then starts from their
result; a head read twice by the tail (HardSwish's `x * relu6(x + 3) / 6` after a
subtract, level 2 35) no longer costs a pass of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.lowering.emit.builder import Block
from nkibot.lowering.emit.conv.epilogue import emit_pair_table, tail_reads
from nkibot.lowering.emit.conv.phaseprefix import channel_param, literal
from nkibot.lowering.emit.rowwise import Kernel
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.layout import Resolved

#: A step of the head: (add or mul, a literal or a kernel argument of one value a channel).
Step = tuple[str, float | str]


@dataclass(frozen=True)
class AffineHead:
    ops: tuple[Op, ...]
    steps: tuple[Step, ...]

    @property
    def origins(self) -> str:
        return ", ".join(dict.fromkeys(op.origin or op.op for op in self.ops))


def _step(res: Resolved, op: Op, prev: str, cout: int) -> Step | None:
    """The head step `op` is (reading `prev`), else None."""
    if len(op.args) != 2 or op.op not in ("add", "sub", "mul", "div"):
        return None
    first = isinstance(op.args[0], Ref) and res.target(op.args[0].name) == prev
    other = op.args[1] if first else op.args[0]
    if not first and not (isinstance(op.args[1], Ref) and res.target(op.args[1].name) == prev):
        return None
    c = literal(other)
    if c is not None:
        if op.op == "sub" and first:
            return "add", -c
        if op.op == "div" and first and c != 0.0:
            return "mul", 1.0 / c
        return (op.op, c) if op.op in ("add", "mul") else None
    param = channel_param(res, other, op, cout)
    return (op.op, param) if param is not None and op.op in ("add", "mul") else None


def find(res: Resolved, conv: Op, tail: tuple[Op, ...]) -> AffineHead | None:
    """The affine head of `tail` (ops after the conv, the first reading it), or None. Each
    value taken but the last is read by the next op alone, and the rest of the tail reads
    neither them nor the conv's own output."""
    prev, cout = conv.name, conv.shape[1]
    ops: list[Op] = []
    steps: list[Step] = []
    for op in tail:
        if ops and len(res.graph.users(prev)) != 1:
            break
        step = _step(res, op, prev, cout)
        if step is None:
            break
        ops.append(op)
        steps.append(step)
        prev = op.name
    if not ops or not tail_reads(res, list(tail[len(ops):]),
                                 [conv.name, *(op.name for op in ops)]):
        return None
    return AffineHead(tuple(ops), tuple(steps))


def emit_table(kernel: Kernel, head: AffineHead, conv_bias: str | None, cout: int,
               origin: str) -> str:
    """The [Cout, 2] HBM table of (scale, shift) per output channel: scale 1, shift the
    conv's bias (or 0), then each step: an add shifts the shift, a multiply scales both.
    Computed once, 128 channels a tile."""
    params = list(dict.fromkeys(v for _, v in head.steps if isinstance(v, str)))
    args = ([conv_bias] if conv_bias is not None else []) + params
    blk = Block(depth=1)
    blk.line("pair = nl.ndarray((csz, 2), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.memset(dst=pair[0:csz, 0:1], value=1.0)")
    if conv_bias is not None:
        blk.line(f"nisa.dma_copy(dst=pair[0:csz, 1:2], src={conv_bias}.reshape(({cout}, 1))"
                 "[nl.ds(c0, csz), 0:1])")
    else:
        blk.line("nisa.memset(dst=pair[0:csz, 1:2], value=0.0)")
    for i, leaf in enumerate(params):
        blk.line(f"p{i} = nl.load({leaf}.reshape(({cout}, 1))[nl.ds(c0, csz), 0:1], "
                 "dtype=nl.float32)")
    for kind, v in head.steps:
        operand = repr(v) if isinstance(v, float) else f"p{params.index(v)}"
        if kind == "add":
            blk.line(f"nisa.tensor_scalar(dst=pair[0:csz, 1:2], data=pair[0:csz, 1:2], "
                     f"op0=nl.add, operand0={operand})")
        else:
            blk.line(f"nisa.tensor_scalar(dst=pair, data=pair, op0=nl.multiply, "
                     f"operand0={operand})")
    return emit_pair_table(kernel, "fold_affine", args, blk, (head.origins, origin), cout)
