"""Graph -> kernel source: pick the emitter that fits, or say plainly why none does."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from nkibot.lowering.emit.builder import nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Graph, Ref
from nkibot.lowering.ladder import emit_group
from nkibot.lowering.schedule.layout import LayoutError, resolve
from nkibot.lowering.schedule.rewrite import (
    expand_norms,
    split_long_reductions,
    split_wide_convs,
)
from nkibot.lowering.schedule.simplify import fold_chains
from nkibot.lowering.stages import (
    Scheduler,
    Stage,
    emit_stages,
    lowers_alone,
    partition,
    scratch_bytes,
    share_helpers,
    trial,
)


@dataclass(frozen=True)
class Variant:
    """Another tiling of the same kernel (same function, same results), e.g. "matmul
    tiling b-panel": the optimize phase times it and keeps it only when it is faster."""

    name: str
    source: str


@dataclass(frozen=True)
class Lowered:
    """A kernel: its source, the @nki.jit function's name, and the torch ops it covers."""

    source: str
    function: str
    ops: list[str] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)
    #: One line per stage when the kernel is scheduled as several (empty for one group).
    plan: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Declined:
    """Why the lowering cannot produce a kernel: unsupported ops, or a layout reason."""

    unsupported: list[str]
    reason: str
    #: The module itself would not build, trace or run (or the child failed): the
    #: reference run says why in the user's own terms, so this is no final answer.
    module_error: bool = False


#: Output bytes the CPU simulator can hold next to the inputs and the reference's copies
#: (its sandbox has 8 GiB): larger outputs are declined before anything is allocated.
SIM_OUTPUT_BUDGET = 512 * 1024 * 1024
ITEMSIZE = {"float32": 4, "int32": 4, "int64": 4, "bfloat16": 2, "float16": 2, "int16": 2}


def _too_big(graph: Graph) -> str:
    sizes = []
    for ref in graph.outputs:
        found = graph.leaf(ref.name) or graph.op(ref.name)
        if found is not None:
            sizes.append((found.shape, math.prod(found.shape) * ITEMSIZE.get(found.dtype, 1)))
    total = sum(n for _, n in sizes)
    if total <= SIM_OUTPUT_BUDGET:
        return ""
    shapes = ", ".join("x".join(map(str, shape)) for shape, _ in sizes)
    return (f"the outputs ({shapes}) take {total / 2**30:.1f} GiB, over the simulator's "
            f"memory budget of {SIM_OUTPUT_BUDGET // 2**20} MiB: pass smaller input shapes "
            "with --shape NAME=DIMSxDTYPE (e.g. halve the dims that size the output)")


#: What a user can do about a graph no tiling fits (every layout decline ends with it).
LAYOUT_ADVICE = ("what you can do: other input shapes with --shape NAME=DIMSxDTYPE (the "
                 "limits above are per tile), a smaller module (convert its parts one by "
                 "one), or a model (--model claude or bedrock, with a key)")


def prune(graph: Graph) -> Graph:
    """The graph without ops no output needs (a flip folded into a scan leaves its own)."""
    needed = {ref.name for ref in graph.outputs}
    for op in reversed(graph.ops):
        if op.name in needed:
            needed |= {a.name for a in op.args if isinstance(a, Ref)}
    return Graph(graph.leaves, [op for op in graph.ops if op.name in needed], graph.outputs,
                 graph.constants)


def kernel_name(entry: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", entry).lower()
    return re.sub(r"\W", "_", snake) + "_kernel"


def _outputs(graph: Graph, kernel: Kernel) -> list[Output]:
    outs = []
    for i, ref in enumerate(graph.outputs):
        var = kernel.names.fresh("out" if len(graph.outputs) == 1 else f"out{i}")
        found = graph.leaf(ref.name) or graph.op(ref.name)
        assert found is not None
        outs.append(Output(ref.name, var, found.shape, found.dtype))
    return outs


def lower_graph(graph: Graph, entry: str) -> Lowered | Declined:
    """The kernel the proxy scorer picks, with every other fitting tiling as a variant."""
    first = _lower(graph, entry, {})
    if isinstance(first, Declined) or not first[1]:
        return first if isinstance(first, Declined) else first[0]
    lowered, alternatives = first
    variants = []
    for decision, name in alternatives:
        other = _lower(graph, entry, {decision: name})
        if not isinstance(other, Declined) and other[0].source != lowered.source:
            variants.append(Variant(f"{decision} tiling {name}", other[0].source))
    return Lowered(lowered.source, lowered.function, lowered.ops, variants, lowered.plan)


def _lower(graph: Graph, entry: str, choices: dict[str, str]
           ) -> tuple[Lowered, list[tuple[str, str]]] | Declined:
    if not graph.outputs:
        return Declined([], "the forward returns no tensor")
    graph = fold_chains(prune(graph))
    too_big = _too_big(graph)
    if too_big:
        return Declined([], too_big)
    stages: list[Stage] = []
    try:
        kernel, outputs = _start(graph, choices)
        emit_group(resolve(graph), outputs, kernel)
    except LayoutError as exc:
        try:
            kernel, outputs = _start(graph, choices)
            staged = split_long_reductions(expand_norms(split_wide_convs(graph),
                                                        lowers_alone(graph, kernel)))
            sched = Scheduler(staged, outputs, kernel.names.taken)
            stages = partition(sched, trial(kernel))
            kernel.names.taken |= sched.taken
            emit_stages(sched, stages, kernel)
            share_helpers(kernel)
        except LayoutError as staged:
            why = str(exc) if len(graph.ops) <= 1 else f"{exc}; and as stages: {staged}"
            return Declined([], f"layout: {why}; {LAYOUT_ADVICE}")
    fn = kernel_name(entry)
    ops = list(dict.fromkeys(op.origin for op in graph.ops if op.origin))
    plan = [stage.summary() for stage in stages]
    source = _module_source(graph, entry, fn, kernel, outputs, ops, stages)
    return Lowered(source, fn, ops, plan=plan), kernel.alternatives


def _start(graph: Graph, choices: dict[str, str]) -> tuple[Kernel, list[Output]]:
    """A fresh kernel with the outputs allocated in shared HBM."""
    kernel = Kernel(choices=choices)
    kernel.names.taken |= {leaf.name for leaf in graph.leaves} | {"nki", "nl", "nisa"}
    outputs = _outputs(graph, kernel)
    for out in outputs:
        if not out.shape:
            kernel.body.comment(f"{out.var} is 0-d in PyTorch: allocated as (1,), returned "
                                "as a () view")
        kernel.body.line(f"{out.var} = nl.ndarray({out.shape or (1,)!r}, "
                         f"dtype={nl_dtype(out.dtype)}, buffer=nl.shared_hbm)")
    return kernel, outputs


def _module_source(graph: Graph, entry: str, fn: str, kernel: Kernel, outputs: list[Output],
                   ops: list[str], stages: list[Stage]) -> str:
    args = ", ".join(leaf.name for leaf in graph.leaves)
    ret = ", ".join(o.var if o.shape else f"{o.var}.reshape(())" for o in outputs)
    lines = [
        f'"""{entry} as an NKI kernel, generated by nkibot\'s deterministic lowering.',
        "",
        f"Source ops: {', '.join(ops) or 'none'}.",
        f"Calling convention: {fn}({args}) -> {', '.join(o.var for o in outputs)}: forward "
        "inputs, then state_dict tensors.",
        *([f"Compile-time constants (Python scalar forward arguments, not kernel arguments): "
           f"{', '.join(f'{k} = {v!r}' for k, v in graph.constants.items())}."]
          if graph.constants else []),
        "All arithmetic runs in fp32 tiles of at most 128 partitions.",
        *_plan_lines(stages),
        '"""',
        "",
        "import nki",
        "import nki.isa as nisa",
        "import nki.language as nl",
        "",
    ]
    for helper in kernel.helpers:
        lines += ["", *helper, ""]
    lines += ["", "@nki.jit", f"def {fn}({args}):"]
    lines += kernel.body.lines
    lines.append(f"    return {ret}")
    return "\n".join(lines) + "\n"


def _plan_lines(stages: list[Stage]) -> list[str]:
    """The schedule, for the header: why the kernel has stages and what each one does."""
    if not stages:
        return []
    if len(stages) == 1:  # the graph fit one group once rewritten (a norm expanded)
        return ["", "Schedule: one stage of the graph as the scheduler rewrote it (a long "
                "reduction split, a wide convolution cut, or a normalisation written as the "
                "ops its tiles compute):",
                f"  1. {stages[0].summary()}"]
    mib = scratch_bytes(stages) / 2**20
    return ["", f"Schedule: {len(stages)} stages (no single emitter covers the whole graph); "
            f"each reads its inputs from HBM and writes its results to HBM scratch "
            f"({mib:.2f} MiB in all) or to the outputs:",
            *(f"  {n}. {stage.summary()}" for n, stage in enumerate(stages, 1))]
