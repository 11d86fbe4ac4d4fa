"""Graph -> kernel source: pick the emitter that fits, or say plainly why none does."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from nkibot.convert.models.lowering.attention import emit_attention
from nkibot.convert.models.lowering.builder import nl_dtype
from nkibot.convert.models.lowering.channelnorm import emit_channelnorm
from nkibot.convert.models.lowering.conv import emit_conv
from nkibot.convert.models.lowering.ir import Graph, Ref
from nkibot.convert.models.lowering.layout import (
    TOTAL,
    LayoutError,
    Placement,
    Resolved,
    candidate_frames,
    place,
    resolve,
)
from nkibot.convert.models.lowering.matmul import emit_matmul
from nkibot.convert.models.lowering.middle import emit_middle
from nkibot.convert.models.lowering.norm import emit_blocknorm
from nkibot.convert.models.lowering.pool import emit_pool
from nkibot.convert.models.lowering.rowwise import Kernel, Output, emit_rowwise
from nkibot.convert.models.lowering.scan import emit_scan


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


def _outputs(graph: Graph, res: Resolved, kernel: Kernel) -> list[Output]:
    outs = []
    for i, ref in enumerate(graph.outputs):
        var = kernel.names.fresh("out" if len(graph.outputs) == 1 else f"out{i}")
        found = graph.leaf(ref.name) or graph.op(ref.name)
        assert found is not None
        outs.append(Output(ref.name, var, found.shape, found.dtype))
    return outs


def _place_any(res: Resolved, outputs: list[str]) -> Placement:
    errors = []
    for frame in candidate_frames(res):
        try:
            return place(res, frame, outputs)
        except LayoutError as exc:
            errors.append(str(exc))
    raise LayoutError(errors[0] if errors else "no layout fits this graph")


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
    return Lowered(lowered.source, lowered.function, lowered.ops, variants)


def _lower(graph: Graph, entry: str, choices: dict[str, str]
           ) -> tuple[Lowered, list[tuple[str, str]]] | Declined:
    if not graph.outputs:
        return Declined([], "the forward returns no tensor")
    graph = prune(graph)
    too_big = _too_big(graph)
    if too_big:
        return Declined([], too_big)
    try:
        res = resolve(graph)
        kernel = Kernel(choices=choices)
        kernel.names.taken |= {leaf.name for leaf in graph.leaves} | {"nki", "nl", "nisa"}
        outputs = _outputs(graph, res, kernel)
        for out in outputs:
            if not out.shape:
                kernel.body.comment(f"{out.var} is 0-d in PyTorch: allocated as (1,), returned "
                                    "as a () view")
            kernel.body.line(f"{out.var} = nl.ndarray({out.shape or (1,)!r}, "
                             f"dtype={nl_dtype(out.dtype)}, buffer=nl.shared_hbm)")
        if any(op.op == "attention" for op in res.ops):
            emit_attention(res, outputs, kernel)
        elif any(op.op == "blocknorm" for op in res.ops):
            emit_blocknorm(res, outputs, kernel)
        elif any(op.op == "scan" for op in res.ops):
            emit_scan(res, outputs, kernel)
        elif any(op.op == "pool" for op in res.ops):
            emit_pool(res, outputs, kernel)
        elif any(op.op == "conv" for op in res.ops):
            emit_conv(res, outputs, kernel)
        elif any(op.op == "matmul" for op in res.ops):
            emit_matmul(res, outputs, kernel)
        elif not emit_middle(res, outputs, kernel) and not emit_channelnorm(res, outputs,
                                                                            kernel):
            pl = _place_any(res, [o.name for o in outputs])
            if any(pl.kinds[res.target(o.name)] not in ("full", "row", TOTAL) for o in outputs):
                raise LayoutError("an output that is a broadcast parameter")
            emit_rowwise(res, pl, outputs, kernel)
    except LayoutError as exc:
        return Declined([], f"layout: {exc}")
    fn = kernel_name(entry)
    ops = list(dict.fromkeys(op.origin for op in graph.ops if op.origin))
    return Lowered(_module_source(graph, entry, fn, kernel, outputs, ops), fn, ops), (
        kernel.alternatives)


def _module_source(graph: Graph, entry: str, fn: str, kernel: Kernel, outputs: list[Output],
                   ops: list[str]) -> str:
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
