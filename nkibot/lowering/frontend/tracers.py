"""Trace a module to a torch.fx graph: symbolic first, then at the task's concrete shapes.

`torch.fx.symbolic_trace` keeps sizes symbolic, so ordinary model code fails it: a loop
over `x.shape` ("'Proxy' object cannot be interpreted as an integer"), `expand(*sizes)`,
`len(x)`, `if x.size(-1) > 64`. Tracing again at the input shapes (torch.fx's meta tracer:
every proxy carries a meta tensor, so sizes, `dim()` and `len()` are plain ints and
Python branches on them are taken once) records the same torch-level graph for those. A
graph that still cannot be traced depends on tensor values (control flow on data); the
error names the construct and the line of the user's file it is on.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental import meta_tracer

_TORCH_DIR = str(Path(torch.__file__).parent)


def user_stack() -> str:
    """The calling stack from the outermost `forward` in, torch's own frames left out, in
    traceback's format: what `record_stack_traces` stores in `node.stack_trace`, and what
    `trace.call_site` reads. torch.fx's own recording imports torch._dynamo, torch.export
    and parts of inductor to learn which files to leave out; this only reads frames.
    (Dynamo still loads once an op runs on meta tensors: torch's Python meta kernels are
    wrapped to disable it. What this spares is the rest: ~400 modules, 0.2 s of CPU.)"""
    frames: list[tuple[str, int, str]] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    frames.reverse()
    first = next((i for i, f in enumerate(frames) if f[2] == "forward"), len(frames))
    return "".join(f'  File "{name}", line {line}, in {func}\n'
                   for name, line, func in frames[first:]
                   if not name.startswith(_TORCH_DIR) and name != __file__)


class _Recording(fx.Tracer):
    """A tracer that gives every node the user's stack (`user_stack`)."""

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        node.stack_trace = user_stack()
        return node


class _ShapeProxy(meta_tracer.MetaProxy):
    """A proxy whose sizes are the concrete ones of its meta tensor."""

    def size(self, dim: int | None = None) -> Any:
        meta = getattr(self, "_tensor_meta", None)
        if isinstance(meta, torch.Tensor):  # MetaProxy.size(0) returned the whole size
            return meta.size() if dim is None else meta.size(dim)
        return super().size(dim)

    def __len__(self) -> int:
        meta = getattr(self, "_tensor_meta", None)
        if isinstance(meta, torch.Tensor) and meta.dim() > 0:
            return int(meta.shape[0])
        if isinstance(meta, tuple | list):
            return len(meta)
        raise RuntimeError("len() of a value whose size is not known while tracing")

    def __iter__(self) -> Any:
        meta = getattr(self, "_tensor_meta", None)
        if isinstance(meta, torch.Tensor | tuple | list):
            return iter([self[i] for i in range(len(self))])  # type: ignore[index]
        return super().__iter__()


class _ShapeTracer(_Recording, meta_tracer.MetaTracer):
    #: buffers (a causal mask) are graph inputs read through get_attr, as state, not
    #: tensors sliced while tracing and baked into the graph as constants
    proxy_buffer_attributes = True

    def proxy(self, node: fx.Node) -> meta_tracer.MetaProxy:
        return _ShapeProxy(node, self)


def symbolic(module: torch.nn.Module) -> fx.GraphModule:
    """`fx.symbolic_trace`, recording each node's stack so a decline can name the line."""
    tracer = _Recording()
    with _attributes_kept(module):
        graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, module.__class__.__name__)


def at_shapes(module: torch.nn.Module, inputs: Sequence[object]) -> fx.GraphModule:
    """Trace with every tensor input's meta tensor known: sizes are constants."""
    names = [p.name for p in inspect.signature(module.forward).parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    metas = {n: v for n, v in zip(names, inputs, strict=False) if isinstance(v, torch.Tensor)}
    # parameters on meta too: a submodule's meta value (nn.Linear on a meta input) is
    # computed by running it, and CPU weights against meta inputs fail there, leaving the
    # result without sizes (then `q, k, v = linear(x).split(...)` cannot unpack). Only
    # shapes and dtypes of the state are read after tracing.
    module.to("meta")
    tracer = _ShapeTracer()
    with warnings.catch_warnings(), _attributes_kept(module):
        # the meta tracer warns for each op whose meta value it cannot compute (a
        # Python scalar input): that op's sizes stay symbolic, as under symbolic_trace
        warnings.simplefilter("ignore", UserWarning)
        graph = tracer.trace(module, meta_args=metas)
    name = module.__class__.__name__
    return fx.GraphModule(tracer.root, graph, name)


def trace_module(module: torch.nn.Module, inputs: Sequence[object], source_path: str,
                 entry: str) -> fx.GraphModule:
    """The first tracer that succeeds; a TraceError-ready message when none does."""
    failures: list[tuple[str, BaseException]] = []
    runs: list[tuple[str, Callable[[], fx.GraphModule]]] = [
        ("torch.fx", lambda: symbolic(module)),
        ("torch.fx at the input shapes", lambda: at_shapes(module, inputs))]
    for label, run in runs:
        try:
            return run()
        except Exception as exc:  # the user's code: any error means "try the next tracer"
            failures.append((label, exc))
    raise TracingFailed(describe(failures, source_path, entry))


@contextlib.contextmanager
def _attributes_kept(module: torch.nn.Module) -> Iterator[None]:
    """Undo the attributes a traced forward assigns: `self.hidden = torch.tanh(...)`
    (KernelBench level 3 33) stores a proxy, which the graph module, the next tracer and
    the lowering would read back as the attribute. New attributes stay unless they hold a
    proxy: the tracer itself adds tensor constants (`_tensor_constant0`) to the root.
    Parameters and buffers live in dicts kept as they are, so a move to meta stays."""
    saved = [(m, dict(vars(m))) for m in module.modules()]
    try:
        yield
    finally:
        for sub, before in saved:
            now = vars(sub)
            for key in [k for k, v in now.items() if k not in before
                        and isinstance(v, fx.Proxy)]:
                del now[key]
            now.update((k, v) for k, v in before.items() if now.get(k) is not v)


def fold_attribute_copies(gm: fx.GraphModule, state: dict[str, str]) -> None:
    """`self.h.copy_(x)` into a tensor attribute that is not state (KernelBench level 3 33
    keeps its hidden state so and overwrites it with the forward's `initial_hidden`): later
    reads of `self.h`, and copy_'s result, become x cast and broadcast to h, as copy_
    writes it, and h's value before the copy is read by nothing. Anything else that reads
    such an attribute stays a constant (`tensor_constants`)."""
    graph, latest = gm.graph, {}  # type: fx.Graph, dict[str, fx.Node]
    for node in list(graph.nodes):
        key = str(node.args[0].target) if _copies_into_attribute(node, state) else ""
        if node.op == "get_attr" and str(node.target) in latest:
            node.replace_all_uses_with(latest[str(node.target)])
            graph.erase_node(node)
        elif key and isinstance(value := _attribute(gm, key), torch.Tensor):
            with graph.inserting_after(node):
                cast = graph.call_method("to", (node.args[1], value.dtype))
            with graph.inserting_after(cast):
                latest[key] = graph.call_method("expand", (cast, *value.shape))
            target = node.args[0]
            node.replace_all_uses_with(latest[key])
            graph.erase_node(node)
            if isinstance(target, fx.Node) and not target.users:
                graph.erase_node(target)
    gm.recompile()


def _copies_into_attribute(node: fx.Node, state: dict[str, str]) -> bool:
    dst = node.args[0] if node.op == "call_method" and node.target == "copy_" else None
    return (isinstance(dst, fx.Node) and dst.op == "get_attr" and str(dst.target) not in state
            and len(node.args) > 1 and isinstance(node.args[1], fx.Node))


def _attribute(gm: fx.GraphModule, key: str) -> object:
    value: object = gm
    for part in key.split("."):
        value = getattr(value, part, None)
    return value


class TracingFailed(Exception):
    """No tracer could trace the module; the message is user-facing."""


def describe(failures: list[tuple[str, BaseException]], source_path: str, entry: str) -> str:
    """What failed, where in the user's file, and what to do about it."""
    exc = failures[-1][1]
    first = (str(exc).strip().splitlines() or [repr(exc)])[0]
    where = ""
    for _, failure in reversed(failures):
        where = user_line(failure, source_path)
        if where:
            break
    # Otherwise the message is the tracer's, about its proxies: say whose limit it is,
    # so it does not read as a bug in a module that runs as written.
    hint = (" (a limit of the lowering's tracer, not an error in the module; a model, "
            "--model claude or bedrock with a key, can still convert it)")
    if "control flow" in first or "data-dependent" in first or "meta tensor" in first:
        hint = (" (the forward branches or loops on tensor values; kernels have fixed "
                "control flow: compute both sides and select with torch.where)")
    tried = ", ".join(name for name, _ in failures)
    return f"could not trace {entry} ({tried}): {first}{where}{hint}"


def user_line(exc: BaseException, source_path: str) -> str:
    """' at FILE:LINE: `code`' for the innermost frame of the user's file, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == source_path]
    if not frames:
        return ""
    frame = frames[-1]
    code = (frame.line or "").strip()
    return f" at {source_path}:{frame.lineno}" + (f": `{code}`" if code else "")


#: A tensor constant as the lowering can rebuild it: ("scalar", value, 0), ("fill", value,
#: 0) or ("arange", start, step).
Constant = tuple[str, float, float]


def tensor_constants(gm: fx.GraphModule, state: dict[str, str]) -> dict[str, Constant]:
    """The tensor attributes the graph reads that are not state (`torch.tensor(0.5)`,
    `torch.zeros(4, 64)` or `torch.arange(8)` with constant arguments, which torch.fx
    evaluates while tracing), when one value or an arithmetic range describes them.
    Read before the module moves to the meta device."""
    out: dict[str, Constant] = {}
    for node in gm.graph.nodes:
        key = str(node.target)
        if node.op != "get_attr" or key in state:
            continue
        value = _attribute(gm, key)
        if isinstance(value, torch.Tensor) and not value.is_meta and value.numel() > 0:
            found = _describe(value)
            if found is not None:
                out[key] = found
    return out


def _describe(value: torch.Tensor) -> Constant | None:
    flat = value.detach().flatten().double()
    first = float(flat[0])
    if value.numel() == 1:
        return ("scalar", first, 0.0)
    if bool((flat == flat[0]).all()):
        return ("fill", first, 0.0)
    step = float(flat[1] - flat[0])
    ramp = first + step * torch.arange(flat.numel(), dtype=torch.float64)
    if value.dim() == 1 and bool((flat == ramp).all()):
        return ("arange", first, step)
    return None
