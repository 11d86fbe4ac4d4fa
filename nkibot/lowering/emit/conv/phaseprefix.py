"""What a phase-by-phase conv's evictions take from the head of its tail.

A strided transposed conv evicts each output phase into its strided view of the tile
(convphase.py), the bias its one add; its pointwise ops then run on the whole tile
(convtail.py). The tail's head can ride on those evictions instead:

- adds of a literal or of a per-channel parameter (a `[C, 1, 1]` bias, KernelBench's
  "BiasAdd"), and subtracts of a literal, fold into the resident bias column once per
  group (`emit_fold`);
- then one clamp bound by a literal (a maximum or minimum, a ReLU): the Vector Engine's
  eviction is a two-op tensor_scalar, the bound its second op; a ReLU also runs as the
  Scalar Engine's activation function, so only then may phases evict there too.

A bound so taken is a full pass the tail no longer makes. Level 2 93 (add 0.5, min 0,
GELU, times 2) and 2 (a bias parameter, then one clamp to [0, 0.5] after
schedule/simplify.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nkibot.lowering.emit.builder import PMAX, Block
from nkibot.lowering.emit.conv.epilogue import tail_reads
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule.convspec import ConvSpec
from nkibot.lowering.schedule.layout import Resolved

BOUNDS = {"maximum": "nl.maximum", "minimum": "nl.minimum"}


@dataclass(frozen=True)
class PhasePrefix:
    """The absorbed ops: `adds` (a literal, or a kernel argument of one value a channel),
    then at most one `bound` (op, literal)."""

    ops: tuple[Op, ...]
    adds: tuple[float | str, ...]
    bound: tuple[str, float] | None

    @property
    def relu(self) -> bool:
        """Whether the bound is a ReLU, which the Scalar Engine's eviction applies too."""
        return self.bound == ("maximum", 0.0)

    @property
    def origins(self) -> str:
        return ", ".join(dict.fromkeys(op.origin or op.op for op in self.ops))


def channel_param(res: Resolved, arg: object, op: Op, cout: int) -> str | None:
    """The kernel argument `arg` is when it holds one fp32 value per output channel
    (shape [C, 1, ...] against the output's [N, C, ...]), else None."""
    if not isinstance(arg, Ref):
        return None
    view = res.views.get(res.target(arg.name))
    if view is None or view.transposed or view.sliced or view.general or (
            view.leaf.dtype != "float32" or math.prod(view.leaf.shape) != cout):
        return None
    shape = (1,) * (len(op.shape) - len(view.shape)) + tuple(view.shape)
    ok = len(shape) == len(op.shape) and shape[1] == cout and math.prod(shape) == cout
    return view.leaf.name if ok else None


def literal(arg: object) -> float | None:
    return float(arg) if isinstance(arg, (int, float)) and not isinstance(arg, bool) else None


def find(res: Resolved, conv: Op, tail: tuple[Op, ...]) -> PhasePrefix | None:
    """The head of `tail` (ops after the conv, the first reading it) the evictions take,
    or None. Each absorbed value but the last is read by the next op alone, and the rest
    of the tail reads neither them nor the conv's own output."""
    prev, cout = conv.name, conv.shape[1]
    ops: list[Op] = []
    adds: list[float | str] = []
    bound: tuple[str, float] | None = None
    for op in tail:
        refs = [a for a in op.args if isinstance(a, Ref) and res.target(a.name) == prev]
        if len(refs) != 1 or (ops and len(res.graph.users(prev)) != 1):
            break
        other = next((a for a in op.args if a is not refs[0]), None)
        if op.op == "add" and bound is None and len(op.args) == 2:
            value: float | str | None = literal(other)
            if value is None:
                value = channel_param(res, other, op, cout)
            if value is None:
                break
            adds.append(value)
        elif op.op == "sub" and bound is None and len(op.args) == 2 and (
                op.args[0] is refs[0] and literal(other) is not None):
            adds.append(-float(other))  # type: ignore[arg-type]
        elif op.op == "relu" and len(op.args) == 1:
            bound = ("maximum", 0.0)
        elif op.op in BOUNDS and len(op.args) == 2 and literal(other) is not None:
            c = literal(other)
            assert c is not None
            bound = (op.op, c)
        else:
            break
        ops.append(op)
        prev = op.name
        if bound is not None:
            break
    if bound is None or not tail_reads(res, list(tail[len(ops):]),
                                       [conv.name, *(op.name for op in ops)]):
        return None
    return PhasePrefix(tuple(ops), tuple(adds), bound)


def emit_fold(body: Block, spec: ConvSpec, prefix: PhasePrefix, bias: bool) -> None:
    """The prefix's adds into the resident bias column b_sb (created, zero, when the
    conv has no bias), once per group."""
    if not prefix.adds:
        return
    cout = spec.cout_g
    tiles = -(-cout // PMAX)
    body.comment(f"{prefix.origins}: the adds folded into the bias column, once per group")
    if not bias:
        body.line(f"b_sb = nl.ndarray(({min(cout, PMAX)}, {tiles}, 1), dtype=nl.float32, "
                  "buffer=nl.sbuf)")
        body.line("nisa.memset(dst=b_sb, value=0.0)")
    for add in prefix.adds:
        if isinstance(add, str):
            body.line(f"add_v = {add}.reshape(({spec.groups}, {cout}, 1))")
        for j in range(tiles):
            lo, c = j * PMAX, min(PMAX, cout - j * PMAX)
            col = f"b_sb[0:{c}, {j}, 0:1]"
            if isinstance(add, float):
                body.line(f"nisa.tensor_scalar(dst={col}, data={col}, op0=nl.add, "
                          f"operand0={add!r})")
                continue
            body.line(f"add_c = nl.ndarray(({c}, 1), dtype=nl.float32, buffer=nl.sbuf)")
            body.line(f"nisa.dma_copy(dst=add_c, src=add_v[g, {lo}:{lo + c}, 0:1])")
            body.line(f"nisa.tensor_tensor(dst={col}, data1={col}, data2=add_c, op=nl.add)")
