"""Trace a Task's reference module with torch.fx at its input shapes into a lowering Graph.

This executes user code: it runs in the sandboxed child (`python -m
nkibot.lowering`) and in tests. The module is moved to the meta device
so that tracing costs no memory or time whatever the shapes; non-tensor values
(sizes, dims, eps read from attributes) are constant-folded as they come out.
"""

from __future__ import annotations

import builtins
import keyword
import linecache
import operator
import re
import sys
import types
from typing import Any

import torch
import torch.fx as fx

from nkibot.lowering.frontend.catalogue import handler
from nkibot.lowering.frontend.ir import Graph, Leaf, Ref
from nkibot.lowering.frontend.modules import module_call
from nkibot.lowering.frontend.sink import Sink, Unlowered, Unsupported
from nkibot.lowering.frontend.tracers import (
    Constant,
    TracingFailed,
    fold_attribute_copies,
    tensor_constants,
    trace_module,
)
from nkibot.task import Task

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
_RESERVED = {"nki", "nl", "nisa", "np", "out", "P", "math"}


class TraceError(Exception):
    """The module could not be loaded or traced; the message is user-facing."""


def load_module(task: Task) -> torch.nn.Module:
    """Exec the reference source in a fresh module namespace and build the entry point."""
    mod = types.ModuleType("nkibot_reference")
    mod.__file__ = task.source_path
    sys.modules[mod.__name__] = mod
    # errors while tracing quote the user's line even when the file is not on disk here
    lines = task.reference_source.splitlines(keepends=True)
    linecache.cache[task.source_path] = (len(task.reference_source), None, lines,
                                         task.source_path)
    try:
        exec(compile(task.reference_source, task.source_path, "exec"), mod.__dict__)  # noqa: S102
        cls = getattr(mod, task.entry_point)
        # eval mode, as the harness runs the reference: running stats, no dropout
        module = cls(*task.init_args, **task.init_kwargs).eval()
    except Exception as exc:
        raise TraceError(f"could not build {task.entry_point}: {exc!r}") from exc
    if not isinstance(module, torch.nn.Module):
        raise TraceError(f"{task.entry_point} is not an nn.Module")
    return module


def sanitize(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name)
    if not base or base[0].isdigit() or keyword.iskeyword(base) or base in _RESERVED:
        base = f"a_{base}"
    out, n = base, 1
    while out in taken:
        n += 1
        out = f"{base}_{n}"
    taken.add(out)
    return out


def op_name(node: fx.Node) -> str:
    """The torch name of an fx node's operation (the key into HANDLERS)."""
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    if target is builtins.getattr:
        return str(node.args[1])
    name = getattr(target, "__name__", str(target))
    return {"floordiv": "floor_divide", "neg": "neg", "pos": "copy"}.get(name, name)


class _Lowerer(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, graph: Graph, state: dict[str, str],
                 source: tuple[str, str] = ("", "")) -> None:
        super().__init__(gm)
        #: (path, text) of the user's file, and where each unsupported op was called in it
        self.source, self.sites = source, {}  # type: tuple[str, str], dict[str, str]
        self.node: fx.Node | None = None
        self.ir, self.state = graph, state
        self.consts: dict[str, Constant] = {}
        self.values: dict[str, object] = {}
        self.unsupported: list[str] = []
        self.names = {leaf.name for leaf in graph.leaves}
        self.placeholders = iter([leaf for leaf in graph.leaves if leaf.source == "input"])

    def run_node(self, n: fx.Node) -> Any:
        self.node = n
        result = self._one_step(n)
        if result is None:
            result = super().run_node(n)
        self.values[n.name] = self.lower(n, result)
        return result

    def _one_step(self, n: fx.Node) -> Any:
        """The outputs of an nn.LSTM/GRU/RNN that nothing lowers, without running it over
        its sequence: on meta tensors PyTorch decomposes it step by step (KernelBench level 3
        36-42: 30-90 s before the decline). One step gives every output's shape but the
        sequence's length, which is the input's. None: run the node as usual."""
        if n.op != "call_module":
            return None
        sub = self.module.get_submodule(str(n.target))
        if not isinstance(sub, torch.nn.RNNBase):
            return None
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
            return None
        try:
            name = module_call(sub, str(n.target), list(args), dict(kwargs), self.state)[0]
        except Exception:
            return None
        if handler(name) is not None:
            return None
        seq = 1 if sub.batch_first and x.dim() == 3 else 0
        out, state = sub(x.narrow(seq, 0, 1), *args[1:], **kwargs)
        shape = list(out.shape)
        shape[seq] = x.shape[seq]
        return out.new_empty(shape), state

    def lower(self, n: fx.Node, result: object) -> object:
        if n.op == "placeholder":
            if str(n.target) in self.ir.constants:
                return self.ir.constants[str(n.target)]
            return Ref(next(self.placeholders).name)
        if n.op == "get_attr":
            key = str(n.target)
            if key in self.state:
                return Ref(self.state[key])
            if key in self.consts:  # a tensor constant a fill or a range describes
                return self.constant(n, self.consts[key], result)
            if isinstance(result, torch.Tensor):
                self._fail("aten.lift_fresh_copy.default (a tensor constant of "
                           f"{result.numel()} elements)")
                return _UNSUP
            return result
        if n.op == "output":
            out = self.translate(n.args[0])
            return _UNSUP if self._read_unlowered(out) else out
        if not _has_tensor(result):
            return result  # sizes, dims, flags: already folded by executing on meta
        args = self.translate(list(n.args))
        kwargs = self.translate(dict(n.kwargs))
        # getitem picks from a handler's tuple, which may hold an output it left out
        if op_name(n) != "getitem" and self._read_unlowered([args, kwargs]):
            return _UNSUP
        if n.op == "call_module":
            target = str(n.target)
            name, args, kwargs = module_call(self.module.get_submodule(target), target,
                                             args, kwargs, self.state)
        else:
            name = op_name(n)
        if _contains_unsup(args) or _contains_unsup(kwargs):
            if handler(name) is None and name != "getitem":
                self._fail(f"aten.{name}.default")  # list every one, not the first
            return _UNSUP
        return self.apply(name, n, args, kwargs, result)

    def apply(self, name: str, n: fx.Node, args: Any, kwargs: Any, result: object) -> object:
        if name in ("values", "indices") and isinstance(args[0], tuple):
            item = args[0][0 if name == "values" else 1]
            return self._fail("aten.max.dim indices") if item is None else item
        if name == "getitem":
            if isinstance(args[0], tuple):
                item = args[0][args[1]]
                # torch.max/min(x, dim) indices are not lowered
                return self._fail("aten.argmax.default") if item is None else item
            name, args = "subscript", list(args)
        lower = handler(name)
        if lower is None:
            return self._fail(f"aten.{name}.default")
        if isinstance(result, torch.Tensor):
            kwargs["__shape"] = tuple(result.shape)
            dtype = DTYPE_NAMES.get(result.dtype, "float32")
        else:
            tensors = [t for t in result if isinstance(t, torch.Tensor)]  # type: ignore[attr-defined]
            kwargs["__shapes"] = [tuple(t.shape) for t in tensors]
            dtype = DTYPE_NAMES.get(tensors[0].dtype, "float32") if tensors else "float32"
        sink = Sink(self.ir, origin=_origin(n), final=sanitize(n.name, self.names), dtype=dtype)
        try:
            return lower(sink, args, kwargs)
        except Unsupported as exc:
            return self._fail(exc.op + (f" ({exc.why})" if exc.why else ""))

    def constant(self, n: fx.Node, const: Constant, result: object) -> object:
        kind, first, step = const
        if kind == "scalar":
            return first
        if kind == "fill":
            return self.apply("full", n, [tuple(result.shape), first], {}, result)  # type: ignore[attr-defined]
        count = int(result.numel())  # type: ignore[attr-defined]
        return self.apply("arange", n, [first, first + step * count, step], {}, result)

    def _read_unlowered(self, value: object) -> bool:
        """Declines every output left uncomputed (`Unlowered`) that `value` holds: it is
        read."""
        found = list(_unlowered(value))
        for item in found:
            self._fail(f"{item.op} ({item.why})")
        return bool(found)

    def _fail(self, op: str) -> object:
        self.unsupported.append(op)
        if self.node is not None:
            self.sites.setdefault(op, call_site(self.node, *self.source))
        return _UNSUP

    def translate(self, value: Any) -> Any:
        if isinstance(value, fx.Node):
            return self.values[value.name]
        if isinstance(value, list | tuple):
            return type(value)(self.translate(v) for v in value)
        if isinstance(value, dict):
            return {k: self.translate(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self.translate(value.start), self.translate(value.stop),
                         self.translate(value.step))
        return value


class _Unsup:
    def __repr__(self) -> str:
        return "<unsupported>"


_UNSUP = _Unsup()


def _contains_unsup(value: object) -> bool:
    if value is _UNSUP:
        return True
    if isinstance(value, list | tuple):
        return any(_contains_unsup(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_unsup(v) for v in value.values())
    return False


def _unlowered(value: object) -> list[Unlowered]:
    if isinstance(value, Unlowered):
        return [value]
    if isinstance(value, list | tuple):
        return [u for v in value for u in _unlowered(v)]
    if isinstance(value, dict):
        return [u for v in value.values() for u in _unlowered(v)]
    return []


def _has_tensor(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list | tuple) and any(_has_tensor(v) for v in value)


def _origin(n: fx.Node) -> str:
    if n.op == "call_method":
        return f"Tensor.{n.target}"
    if n.op == "call_module":
        return f"self.{n.target}"
    target = n.target
    module = getattr(target, "__module__", "") or ""
    if target in vars(operator).values():
        symbol = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "pow": "**",
                  "matmul": "@", "neg": "unary -"}.get(op_name(n), op_name(n))
        return f"operator {symbol}"
    prefix = "F" if "functional" in module or module == "torch._C._nn" else "torch"
    return f"{prefix}.{op_name(n)}"


def call_site(n: fx.Node, path: str, text: str) -> str:
    """The PyTorch call behind `n` in the user's words: `torch.erfinv at m.py:5: `code``."""
    where = ""
    for line in reversed((n.stack_trace or "").splitlines()):
        found = re.match(r'\s*File "(.+)", line (\d+)', line)
        if found and found.group(1) == path:
            number = int(found.group(2))
            code = (text.splitlines()[number - 1:number] or [""])[0].strip()
            where = f" at {path}:{number}" + (f": `{code}`" if code else "")
            break
    return _origin(n) + where


def trace_graph(task: Task, sites: dict[str, str] | None = None) -> tuple[Graph, list[str]]:
    """(graph, unsupported ops) for the task's module at its input shapes. `sites`, when
    given, is filled with each unsupported op's call in the user's file (`call_site`)."""
    module = load_module(task)
    graph, state, taken = Graph(), {}, set()  # type: Graph, dict[str, str], set[str]
    meta_inputs = [s.value if s.is_constant else
                   torch.empty(s.shape, dtype=TORCH_DTYPES[s.dtype], device="meta")
                   for s in task.inputs]
    try:
        gm = trace_module(module, meta_inputs, task.source_path, task.entry_point)
    except TracingFailed as exc:
        raise TraceError(str(exc)) from exc
    params = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, spec in zip(params, task.inputs, strict=False):
        if spec.value is not None:  # a Python scalar: folded into the kernel as a constant
            graph.constants[str(node.target)] = spec.value
            continue
        graph.leaves.append(Leaf(sanitize(str(node.target), taken), tuple(spec.shape),
                                 spec.dtype, "input", str(node.target)))
    for key, value in module.state_dict().items():
        name = sanitize(key, taken)
        state[key] = name
        graph.leaves.append(Leaf(name, tuple(value.shape), DTYPE_NAMES.get(value.dtype, "float32"),
                                 "state", key))
    if len(params) != len(task.inputs):
        raise TraceError(f"forward takes {len(params)} inputs, the task describes "
                         f"{len(task.inputs)}")
    fold_attribute_copies(gm, state)
    consts = tensor_constants(gm, state)
    gm.to("meta")
    lowerer = _Lowerer(gm, graph, state, (task.source_path, task.reference_source))
    lowerer.consts = consts
    try:
        with torch.device("meta"):  # tensors the forward creates (torch.full, ...) too
            lowerer.run(*meta_inputs)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [repr(exc)])[0]
        raise TraceError(f"could not run {task.entry_point} at the given shapes: {first}") from exc
    out = lowerer.values.get(next(n.name for n in gm.graph.nodes if n.op == "output"))
    outputs = out if isinstance(out, tuple | list) else (out,)
    graph.outputs = [o for o in outputs if isinstance(o, Ref)]
    if sites is not None:
        sites.update(lowerer.sites)
    return graph, _dedupe(lowerer.unsupported)


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
