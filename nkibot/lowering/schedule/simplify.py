"""Pointwise chains by literals folded to their normal form before scheduling.

A run of single-use elementwise ops that each combine the previous value with a literal
(an add, a subtract, a multiply, a divide, a clamp bound, a ReLU) is one function of its
base value `v`: `min(max(v * s + t, lo), hi)`. Each op updates (s, t, lo, hi): an add
shifts all but s; a positive scale scales them; a negative one swaps the bounds (a clamp
commutes, max then min, when lo <= hi); a bound tightens lo and hi. The chain is then
rewritten as at most four ops, the affine pair and the bounds the value's range does
not already imply (`bounds`: a ReLU's, a sigmoid's, a tanh's, through the same steps),
when that is fewer ops than it had; none when it is the identity (a ReLU of a sigmoid),
its readers then reading the base. Compilers do the same with value ranges (LLVM's
instcombine folds min/max of constants; XLA's algebraic simplifier folds clamps).

KernelBench level 2 2 (bias, clamp to [0, 1], times 2, clamp to [0, 1], divided by 2)
is clamp(v, 0, 0.5): six elementwise passes become two.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

from nkibot.lowering.frontend.ir import Graph, Op, Ref

#: The ops a chain is made of: each with the chain's value and a literal (ReLU alone).
CHAIN = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "relu"})
INF = math.inf
#: Value ranges of unary ops whatever their input.
RANGES: dict[str, tuple[float, float]] = {
    "sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "exp": (0.0, INF), "abs": (0.0, INF),
    "square": (0.0, INF), "sqrt": (0.0, INF), "relu": (0.0, INF), "softplus": (0.0, INF),
    "erf": (-1.0, 1.0), "sin": (-1.0, 1.0), "cos": (-1.0, 1.0),
}


@dataclass(frozen=True)
class Form:
    """`min(max(v * s + t, lo), hi)`, lo <= hi."""

    s: float = 1.0
    t: float = 0.0
    lo: float = -INF
    hi: float = INF

    def then(self, op: str, c: float, reverse: bool = False) -> Form | None:
        """This form followed by `op` with literal c (`reverse`: c op value), or None
        when the result has no such form (a scale by zero, bounds that cross)."""
        if op == "relu":
            op, c = "maximum", 0.0
        if op == "sub" and reverse:
            negated = self.then("mul", -1.0)
            return negated.then("add", c) if negated is not None else None
        if op == "sub":
            return self.then("add", -c)
        if op == "div":
            return None if reverse or c == 0 else self.then("mul", 1.0 / c)
        if op == "add":
            return Form(self.s, self.t + c, self.lo + c, self.hi + c)
        if op == "mul":
            if c == 0 or not math.isfinite(c):
                return None
            lo, hi = sorted((self.lo * c, self.hi * c))
            return Form(self.s * c, self.t * c, lo, hi)
        lo, hi = (max(self.lo, c), max(self.hi, c)) if op == "maximum" else (
            min(self.lo, c), min(self.hi, c))
        return Form(self.s, self.t, lo, hi) if lo < hi else None

    def affine_range(self, base: tuple[float, float]) -> tuple[float, float]:
        """The range of v * s + t for v in `base`."""
        ends = [v * self.s + self.t if math.isfinite(v) else math.copysign(INF, v * self.s)
                for v in base]
        return min(ends), max(ends)


def _literal(op: Op, prev: str) -> tuple[float, bool] | None:
    """(c, reverse) of a chain op that reads `prev` and one literal, else None."""
    if op.op == "relu":
        return (0.0, False) if op.args == (Ref(prev),) else None
    if len(op.args) != 2:
        return None
    a, b = op.args
    if a == Ref(prev) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return float(b), False
    if b == Ref(prev) and isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a), op.op in ("sub", "div")
    return None


def bounds(graph: Graph) -> dict[str, tuple[float, float]]:
    """Each op's value range where its ops imply one (else absent: unbounded)."""
    out: dict[str, tuple[float, float]] = {}
    for op in graph.ops:
        if op.op in RANGES:
            out[op.name] = RANGES[op.op]
        src = next((a.name for a in op.args if isinstance(a, Ref)), "")
        lit = _literal(op, src) if op.op in CHAIN and src else None
        if lit is None:
            continue
        lo, hi = out.get(src, (-INF, INF))
        form = Form(lo=lo, hi=hi) if lo < hi else None
        form = form.then(op.op, *lit) if form is not None else None
        if form is not None:
            out[op.name] = (form.lo, form.hi)
    return out


def _chains(graph: Graph) -> list[list[Op]]:
    """Maximal runs of chain ops, each value but the last read by the next op alone."""
    users: dict[str, int] = {}
    for op in graph.ops:
        for a in op.args:
            if isinstance(a, Ref):
                users[a.name] = users.get(a.name, 0) + 1
    outputs = {ref.name for ref in graph.outputs}
    reader: dict[str, Op] = {}
    for op in graph.ops:
        for a in op.args:
            if isinstance(a, Ref):
                reader.setdefault(a.name, op)
    taken: set[str] = set()
    runs: list[list[Op]] = []
    for op in graph.ops:
        if op.name in taken or op.op not in CHAIN:
            continue
        src = next((a.name for a in op.args if isinstance(a, Ref)), "")
        if _literal(op, src) is None:
            continue
        run = [op]
        while users.get(run[-1].name) == 1 and run[-1].name not in outputs:
            nxt = reader[run[-1].name]
            if nxt.op not in CHAIN or _literal(nxt, run[-1].name) is None or (
                    nxt.shape, nxt.dtype) != (op.shape, op.dtype):
                break
            run.append(nxt)
        taken |= {o.name for o in run}
        runs.append(run)
    return runs


def _normal_ops(run: list[Op], form: Form, base: str, base_range: tuple[float, float],
                names: set[str]) -> list[Op]:
    """The chain as its normal form's ops, the last named as the chain's last."""
    last = run[-1]
    origin = ", ".join(dict.fromkeys(op.origin for op in run if op.origin))
    steps: list[tuple[str, float]] = []
    if form.s != 1.0:
        steps.append(("mul", form.s))
    if form.t != 0.0:
        steps.append(("add", form.t))
    lo, hi = form.affine_range(base_range)
    if form.lo > lo:
        steps.append(("maximum", form.lo))
    if form.hi < hi:
        steps.append(("minimum", form.hi))
    if not steps:
        return []  # the identity: readers take the base
    ops: list[Op] = []
    prev = base
    for i, (kind, c) in enumerate(steps):
        name = last.name
        if i < len(steps) - 1:
            name = f"{last.name}_n{i}"
            while name in names:
                name += "_"
            names.add(name)
        args = (Ref(prev),) if kind == "copy" else (Ref(prev), c)
        ops.append(Op(name, kind, args, last.shape, last.dtype, origin))
        prev = name
    return ops


def fold_chains(graph: Graph) -> Graph:
    """The graph with each pointwise chain by literals in its normal form, where that is
    fewer ops (see module doc)."""
    ranges = bounds(graph)
    names = {op.name for op in graph.ops} | {leaf.name for leaf in graph.leaves}
    outputs = {ref.name for ref in graph.outputs}
    swap: dict[str, list[Op]] = {}
    alias: dict[str, str] = {}
    count = Counter(op.name for op in graph.ops)
    twice = {name for name, n in count.items() if n > 1}
    for run in _chains(graph):
        src = next(a.name for a in run[0].args if isinstance(a, Ref))
        if twice & {src, *(op.name for op in run)}:
            continue  # a name written twice (the later op reads the earlier): kept
        base = graph.leaf(src) or graph.op(src)
        if base is None or (base.shape, base.dtype) != (run[-1].shape, run[-1].dtype):
            continue  # a promotion or a broadcast on the way: kept as written
        form: Form | None = Form()
        prev = src
        for op in run:
            lit = _literal(op, prev)
            assert lit is not None and form is not None
            form = form.then(op.op, *lit)
            if form is None:
                break
            prev = op.name
        if form is None:
            continue
        ops = _normal_ops(run, form, alias.get(src, src), ranges.get(src, (-INF, INF)), names)
        if not ops and run[-1].name in outputs:
            ops = [Op(run[-1].name, "copy", (Ref(alias.get(src, src)),), run[-1].shape,
                      run[-1].dtype, run[-1].origin)]
        if len(ops) < len(run):
            swap[run[0].name] = ops
            swap.update({op.name: [] for op in run[1:]})
            if not ops:
                alias[run[-1].name] = alias.get(src, src)
    if not swap:
        return graph
    out: list[Op] = []
    for op in graph.ops:
        for new in swap.get(op.name, [op]):
            args = tuple(Ref(alias.get(a.name, a.name)) if isinstance(a, Ref) else a
                         for a in new.args)
            out.append(replace(new, args=args) if args != new.args else new)
    return Graph(graph.leaves, out, graph.outputs, graph.constants)
