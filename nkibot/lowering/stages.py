"""The scheduler's floor: a graph whose operators each lower alone becomes stages of one kernel.

The ops, in trace order (topological), are cut into contiguous groups, each the longest run
the single-anchor emitters accept (`ladder.emit_group`), found greedily with a short
look-ahead (a run may fit only once the op that completes it joins). A value made by one
group and read by a later one lives in an HBM scratch tensor (`nl.ndarray(...,
buffer=nl.hbm)`): the later group sees it as a kernel argument, so every emitter renders
its group unchanged, and the coverage of a composite module is the coverage of its
operators. Each stage is named after its source ops in the kernel, and its plan (anchor,
ops, the tensors it reads and writes) is data (`Stage.summary`) for the kernel's header.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from nkibot.lowering.emit.builder import Block, Names, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import BINARY, UNARY, Graph, Leaf, Op, Ref
from nkibot.lowering.ladder import anchor_of, emit_group
from nkibot.lowering.schedule.layout import LayoutError, resolve
from nkibot.lowering.scopes import StageCode, wrap_stages

#: How many ops past a failing one a group may grow to before it is closed.
LOOKAHEAD = 3
#: ... and how many when they are all pointwise: a composite activation written out
#: (GPT-2's tanh GELU is 8 ops) fits an epilogue only once its last op joins.
POINTWISE_LOOKAHEAD = 12
POINTWISE = UNARY | BINARY | {"where"}
#: Ops that only relabel a value: never worth a stage of their own at the end of a group.
RELABEL = frozenset({"view", "copy", "transpose", "slice", "subscript"})
#: Constants (an index iota, a fill) that read nothing: rebuilt in each stage that uses
#: them, never stored to scratch (a column iota alone is no stage any emitter writes).
CONSTANT = frozenset({"iota", "fill", "zeros"})


def _constant(op: Op) -> bool:
    return op.op in CONSTANT and not any(isinstance(a, Ref) for a in op.args)


@dataclass(frozen=True)
class Stage:
    """One group of ops, as its own graph: values of earlier stages are its leaves."""

    graph: Graph
    anchor: str
    reads: tuple[str, ...]  # HBM scratch (or output) tensors of earlier stages it reads
    writes: tuple[Output, ...]  # what it stores: scratch tensors or the kernel's outputs
    scratch: tuple[Output, ...] = ()  # the writes that are HBM scratch, allocated before it
    views: tuple[tuple[str, str], ...] = ()  # (variable, reshape of an earlier stage's tensor)

    def summary(self) -> str:
        origins = list(dict.fromkeys(op.origin or op.op for op in self.graph.ops))
        shown = ", ".join(origins[:6]) + (f" and {len(origins) - 6} more" if len(origins) > 6
                                          else "")
        writes = ", ".join(f"{o.var} {'x'.join(map(str, o.shape)) or '()'} {o.dtype}"
                           for o in self.writes)
        reads = f" reads {', '.join(self.reads)};" if self.reads else ""
        return f"{self.anchor} group of {len(self.graph.ops)} ops ({shown});{reads} writes {writes}"


class Scheduler:
    """Cuts one graph into stages; `homes` names the HBM tensor each op's value lives in.

    Relabels (reshape, transpose, slice, copy) are access patterns, not work: they are left
    out of the op sequence and pulled into each stage that reads them, over the value they
    relabel. Constants (iota, fill) are rebuilt in each stage that reads them. An output
    that is a reshape of a computed value has that value written straight into the output
    tensor, seen with the value's shape (`aliases`).
    """

    def __init__(self, graph: Graph, outputs: Sequence[Output], taken: set[str]) -> None:
        self.graph = graph
        names = Names(set(taken) | {op.name for op in graph.ops})
        self.final: dict[str, Output] = {}
        self.aliases: dict[str, str] = {}  # an alias variable -> its definition
        self.copies: list[tuple[Output, str]] = []  # outputs that are inputs, reshaped
        for out in outputs:
            base = self._reshaped(out.name)
            if graph.leaf(base) is not None:
                self.copies.append((out, base))
            elif base == out.name:
                self.final.setdefault(out.name, out)
            elif base not in self.final:
                op = graph.op(base)
                assert op is not None
                var = names.fresh(f"{out.var}_as_{base}")
                self.aliases[var] = f"{out.var}.reshape({op.shape or (1,)!r})"
                self.final[base] = Output(base, var, op.shape, out.dtype)
        self.homes = {op.name: (self.final[op.name].var if op.name in self.final
                                else names.fresh(f"{op.name}_hbm")) for op in graph.ops}
        self.sequence = [op for op in graph.ops
                         if (op.op not in RELABEL and not _constant(op)) or op.name in self.final]
        self.taken = names.taken
        self.names = names
        self.view_vars: dict[str, str] = {}  # a reshape of a computed value -> its variable

    def _reshaped(self, name: str) -> str:
        """The computed value `name` is a plain reshape chain of, or `name` itself."""
        op = self.graph.op(name)
        while op is not None and op.op in ("view", "copy") and isinstance(op.args[0], Ref):
            leaf = self.graph.leaf(op.args[0].name)
            if leaf is not None and leaf.dtype == op.dtype:
                return leaf.name
            src = self.graph.op(op.args[0].name)
            if src is None or op.dtype != src.dtype:
                break
            name, op = src.name, src
        return name

    def base(self, name: str) -> str:
        """The value a relabel chain reads (itself when `name` is no relabel)."""
        op = self.graph.op(name)
        while (op is not None and op.op in RELABEL and op.name not in self.final
               and isinstance(op.args[0], Ref)):
            name = op.args[0].name
            op = self.graph.op(name)
        return name

    def stage(self, ops: Sequence[Op], later: Sequence[Op]) -> Stage:
        """`ops` as a stage, writing what `later` ops or the kernel's outputs need."""
        made = {op.name for op in ops}
        leaves: dict[str, Leaf] = {}
        body: list[Op] = []
        views: dict[str, str] = {}
        for op in ops:
            args = tuple(self._pull(a, made, (leaves, views), body) if isinstance(a, Ref)
                         else a for a in op.args)
            body.append(replace(op, args=args))
        needed = {self.base(a.name) for op in later for a in op.args if isinstance(a, Ref)}
        writes = tuple(self._output(op) for op in ops
                       if op.name in needed or op.name in self.final)
        sub = Graph(list(leaves.values()), body, [Ref(o.name) for o in writes],
                    self.graph.constants)
        scratch = tuple(leaf.name for leaf in leaves.values() if leaf.source == "stage")
        allocs = tuple(o for o in writes if o.name not in self.final)
        return Stage(sub, anchor_of(resolve(sub)), scratch, writes, allocs,
                     tuple(views.items()))

    def _pull(self, ref: Ref, made: set[str],
              found: tuple[dict[str, Leaf], dict[str, str]], body: list[Op]) -> Ref:
        """`ref` inside the stage: its own value, a leaf, a reshape of an earlier stage's
        tensor (a leaf of its own, so an anchor that wants its input whole gets it), or a
        relabel pulled in over one."""
        leaves, views = found
        name = ref.name
        if name in made or any(op.name == name for op in body):
            return ref
        op = self.graph.op(name)
        base = self._reshaped(name) if op is not None and op.op == "view" else name
        base_op = self.graph.op(base)
        # the base must be computed into its home: a relabel (a slice of a split) has none
        if base != name and base_op is not None and base_op.op not in RELABEL and (
                base not in made and name not in self.final):
            assert op is not None
            var = self.view_vars.setdefault(name, self.names.fresh(f"{self.homes[base]}_as"))
            views[var] = f"{self.homes[base]}.reshape({op.shape or (1,)!r})"
            leaves.setdefault(var, Leaf(var, op.shape, op.dtype, "stage", name))
            return Ref(var)
        if op is not None and _constant(op) and name not in self.final:
            body.append(op)
            return ref
        if op is not None and op.op in RELABEL and name not in self.final:
            args = tuple(self._pull(a, made, found, body) if isinstance(a, Ref) else a
                         for a in op.args)
            body.append(replace(op, args=args))
            return ref
        leaf = self.graph.leaf(name)
        if leaf is None:
            assert op is not None, name
            leaf = Leaf(self.homes[name], op.shape, op.dtype, "stage", name)
        leaves.setdefault(leaf.name, leaf)
        return Ref(leaf.name)

    def _output(self, op: Op) -> Output:
        return Output(op.name, self.homes[op.name], op.shape, op.dtype)


Fits = Callable[[Stage], str | None]


def _window(ops: Sequence[Op], j: int) -> int:
    """The last end of a group grown from ops[:j]: LOOKAHEAD ops on, further over a run of
    pointwise ops (up to POINTWISE_LOOKAHEAD)."""
    end = min(j + LOOKAHEAD, len(ops))
    while end < min(j + POINTWISE_LOOKAHEAD, len(ops)) and all(
            op.op in POINTWISE for op in ops[j:end + 1]):
        end += 1
    return end


def partition(sched: Scheduler, fits: Fits) -> list[Stage]:
    """Greedy longest groups: grow while a group (or one up to LOOKAHEAD ops longer) fits."""
    ops = sched.sequence
    stages: list[Stage] = []
    i = 0
    while i < len(ops):
        best: tuple[int, Stage] | None = None
        first_error = ""
        j = i
        while True:
            grown = None
            for k in range(j + 1, _window(ops, j) + 1):
                stage = sched.stage(ops[i:k], ops[k:])
                error = fits(stage)
                if error is None:
                    grown = (k, stage)
                    break
                first_error = first_error or error
            if grown is None:
                break
            best, j = grown, grown[0]
        if best is None:
            origins = ", ".join(dict.fromkeys(op.origin or op.op for op in ops[i:i + 1]))
            raise LayoutError(f"{origins} does not lower even as its own stage: {first_error}")
        stages.append(best[1])
        i = best[0]
    written = {o.var for stage in stages for o in stage.writes}
    written |= {out.var for out, _ in sched.copies}
    unwritten = [o.var for o in sched.final.values() if o.var not in written]
    if unwritten:  # an output that is an input (or a view of one): no stage computes it
        raise LayoutError(f"outputs no op computes ({', '.join(unwritten)}): return a copy "
                          "made by an op, or leave the input out of the outputs")
    return stages


def trial(kernel: Kernel) -> Fits:
    """A `fits` that renders the stage into a throwaway kernel with `kernel`'s choices."""
    def fits(stage: Stage) -> str | None:
        scratch = Kernel(choices=kernel.choices)
        scratch.names.taken |= set(kernel.names.taken) | {leaf.name for leaf in
                                                          stage.graph.leaves}
        try:
            emit_group(resolve(stage.graph), list(stage.writes), scratch)
        except LayoutError as exc:
            return str(exc)
        except (KeyError, IndexError, ValueError, TypeError, AssertionError) as exc:
            # an emitter meeting a group shape it never assumed (e.g. an output that is only
            # a view of a leaf): that group does not fit; a longer or shorter one may
            return f"{type(exc).__name__}: {exc}"
        return None
    return fits


def lowers_alone(graph: Graph, kernel: Kernel) -> Callable[[Op], bool]:
    """Whether one op of `graph` lowers as a stage of its own, its inputs in HBM."""
    fits = trial(kernel)

    def check(op: Op) -> bool:
        leaves: dict[str, Leaf] = {}
        for arg in op.args:
            if isinstance(arg, Ref) and arg.name not in leaves:
                found = graph.leaf(arg.name) or graph.op(arg.name)
                assert found is not None, arg.name
                leaves[arg.name] = Leaf(arg.name, found.shape, found.dtype, "stage", arg.name)
        out = Output(op.name, kernel.names.fresh(f"{op.name}_alone"), op.shape, op.dtype)
        sub = Graph(list(leaves.values()), [op], [Ref(op.name)], graph.constants)
        return fits(Stage(sub, op.op, (), (out,))) is None
    return check


def emit_stages(sched: Scheduler, stages: Sequence[Stage], kernel: Kernel) -> None:
    """Each stage in order: its scratch outputs allocated in HBM, then a call to a helper
    holding its group's code (`scopes`: its SBUF tiles die with it)."""
    for var, definition in sched.aliases.items():
        kernel.body.line(f"{var} = {definition}")
    for out, leaf in sched.copies:
        kernel.body.comment(f"{out.var} is the input {leaf} itself: one HBM to HBM copy")
        kernel.body.line(f"nisa.dma_copy(dst={out.var}, src={leaf}.reshape({out.shape or (1,)!r}))")
    body = kernel.body
    codes = []
    for n, stage in enumerate(stages, 1):
        body.line()
        body.comment(f"stage {n} of {len(stages)}: {stage.summary()}")
        for out in stage.scratch:
            body.line(f"{out.var} = nl.ndarray({out.shape or (1,)!r}, "
                      f"dtype={nl_dtype(out.dtype)}, buffer=nl.hbm)")
        for var, definition in stage.views:
            body.line(f"{var} = {definition}")
        # each stage places its own views: a leaf may be tiled differently by another stage
        kernel.leaf_views, kernel.hbm_views = {}, {}
        kernel.names.taken |= {leaf.name for leaf in stage.graph.leaves}
        kernel.body = Block(depth=body.depth)
        try:
            emit_group(resolve(stage.graph), list(stage.writes), kernel)
        finally:
            code, kernel.body = kernel.body, body
        codes.append(StageCode(n, tuple(code.lines), len(body.lines)))
    body.lines = wrap_stages(body.lines, codes, kernel.helpers, kernel.names,
                             [out.var for out in sched.final.values()])


def scratch_bytes(stages: Sequence[Stage]) -> int:
    """HBM the stages' scratch tensors take (fp32 or their own dtype), for the header."""
    return sum(math.prod(o.shape or (1,)) * (2 if o.dtype in ("bfloat16", "float16") else 4)
               for stage in stages for o in stage.scratch)


def share_helpers(kernel: Kernel) -> None:
    """Drop helpers identical to an earlier one but for their names (two stages of the same
    form write the same tile function), calling the earlier one instead. A caller may come
    before its callee, so this repeats until nothing more is shared."""
    while _share_once(kernel):
        pass


def _share_once(kernel: Kernel) -> bool:
    renames: dict[str, str] = {}
    # a helper's text with its own name blanked -> the first helper of that text
    kept: dict[tuple[str, ...], str] = {}
    helpers = []
    for helper in kernel.helpers:
        lines = [_renamed(line, renames) for line in helper]
        name = _def_name(lines[0]) if lines else ""
        if name:
            text = tuple(_renamed(line, {name: "_"}) for line in lines)
            twin = kept.setdefault(text, name)
            if twin != name:
                renames[name] = twin
                continue
        helpers.append(lines)
    kernel.helpers = [[_renamed(line, renames) for line in helper] for helper in helpers]
    kernel.body.lines = [_renamed(line, renames) for line in kernel.body.lines]
    return bool(renames)


def _def_name(line: str) -> str:
    match = re.match(r"def (\w+)\(", line)
    return match.group(1) if match else ""


def _renamed(line: str, renames: dict[str, str]) -> str:
    if not renames or not any(old in line for old in renames):
        return line
    # helper names are fresh kernel-wide, so every use (a call, or a helper passed to
    # another) is the helper itself
    return re.sub(r"\b\w+\b", lambda m: renames.get(m.group(0), m.group(0)), line)
