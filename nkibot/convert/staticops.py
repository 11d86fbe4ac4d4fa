"""What a module's `forward` computes, read statically (libcst): ops, submodules, coverage.

This is the cheap first look a scan takes at every module in a repository, before any
code runs: which torch ops the forward calls (functions, tensor methods, operators),
which submodules it calls, and so whether the deterministic lowering probably covers it
(every op has a lowering handler) and whether it uses an op no backend can express.
It is an estimate (the lowering itself decides at trace time) and is labelled so.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    import libcst.matchers as m

from nkibot.convert.discovery import dotted
from nkibot.lowering.frontend import catalogue
from nkibot.lowering.frontend.catalogue import LOWERED_MODULES

__all__ = ["LOWERED_MODULES", "ForwardOps", "covered_op", "forward_ops"]

#: Ops whose result no NKI kernel can reproduce: output shapes that depend on the data
#: (kernel shapes are fixed at compile time), host round-trips, and random sampling (the
#: verifier cannot match PyTorch's generator stream).
NO_BACKEND_OPS: frozenset[str] = frozenset({
    "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount",
    "histc", "item", "tolist", "numpy", "cpu", "cuda", "multinomial", "bernoulli", "rand",
    "randn", "randint", "randperm", "rand_like", "randn_like", "normal_", "uniform_",
})
#: Calls that compute sizes or are Python, not tensor ops (folded away when tracing).
NEUTRAL: frozenset[str] = frozenset({
    "size", "dim", "numel", "len", "range", "int", "bool", "isinstance", "super", "tuple",
    "list", "dict", "zip", "enumerate", "min", "max", "getattr", "hasattr", "print", "str",
    "assert", "ndimension",
})
_BINOPS = {"Add": "add", "Subtract": "sub", "Multiply": "mul", "Divide": "div", "Power": "pow",
           "MatrixMultiply": "matmul", "FloorDivide": "floor_divide", "Modulo": "remainder"}
_NAMESPACES = ("torch.nn.functional.", "nn.functional.", "torch.linalg.", "torch.", "F.")


@dataclass
class ForwardOps:
    """The static reading of one module class (see the module docstring)."""

    ops: Counter[str] = field(default_factory=Counter)
    #: Submodule attribute -> the class it is built from (`self.norm = RMSNorm(...)`).
    submodules: dict[str, str] = field(default_factory=dict)
    #: Classes this module calls from its forward, with the number of call sites.
    calls: Counter[str] = field(default_factory=Counter)

    @property
    def op_count(self) -> int:
        return sum(self.ops.values()) + sum(self.calls.values())

    def uncovered(self) -> list[str]:
        """Ops (own, not submodules') the lowering has no handler for."""
        return sorted(op for op in self.ops if not covered_op(op))

    def no_backend(self) -> list[str]:
        return sorted(op for op in self.ops if op in NO_BACKEND_OPS)


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}


def _self_attr(node: cst.BaseExpression) -> str | None:
    if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
            and node.value.value == "self"):
        return node.attr.value
    return None


def _constructors(init: cst.FunctionDef | None) -> dict[str, str]:
    """`self.x = Foo(...)` / `nn.Foo(...)` in `__init__` -> {x: Foo}; ModuleLists unwrap."""
    found: dict[str, str] = {}
    if init is None:
        return found
    for assign in m.findall(init, m.Assign()):
        assert isinstance(assign, cst.Assign)
        attr = _self_attr(assign.targets[0].target) if len(assign.targets) == 1 else None
        value = assign.value
        if attr is None or not isinstance(value, cst.Call):
            continue
        name = dotted(value.func)
        if name.rsplit(".", 1)[-1] in ("ModuleList", "Sequential"):
            inner = [c for c in m.findall(value, m.Call()) if c is not value]
            names = [dotted(c.func) for c in inner if isinstance(c, cst.Call)]
            name = next((n for n in names if n.rsplit(".", 1)[-1][:1].isupper()), name)
        found[attr] = name
    return found


def _loop_aliases(fn: cst.FunctionDef) -> dict[str, str]:
    """`for block in self.blocks:` -> {block: blocks}, so `block(x)` calls that submodule."""
    aliases: dict[str, str] = {}
    for loop in m.findall(fn, m.For()):
        assert isinstance(loop, cst.For)
        attr = _self_attr(loop.iter)
        if attr is not None and isinstance(loop.target, cst.Name):
            aliases[loop.target.value] = attr
    return aliases


def _op_of_call(call: cst.Call) -> str | None:
    func = dotted(call.func)
    if not func:
        return None
    for prefix in _NAMESPACES:
        if func.startswith(prefix):
            return func[len(prefix):].split(".")[-1]
    return func.rsplit(".", 1)[-1] if "." in func else func


class _Reader:
    def __init__(self, cls: cst.ClassDef) -> None:
        self.methods = _methods(cls)
        self.result = ForwardOps(submodules=_constructors(self.methods.get("__init__")))
        self.seen: set[str] = set()
        self.aliases: dict[str, str] = {}

    def method(self, name: str) -> None:
        fn = self.methods.get(name)
        if fn is None or name in self.seen:
            return
        self.seen.add(name)
        self.aliases.update(_loop_aliases(fn))
        for node in m.findall(fn, m.Call() | m.BinaryOperation() | m.UnaryOperation()
                              | m.AugAssign()):
            self.node(node)

    def node(self, node: cst.CSTNode) -> None:
        out = self.result
        if isinstance(node, cst.BinaryOperation | cst.AugAssign):
            op = _BINOPS.get(type(node.operator).__name__.removesuffix("Assign"))
            if op:
                out.ops[op] += 1
            return
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Minus):
                out.ops["neg"] += 1
            return
        assert isinstance(node, cst.Call)
        name = dotted(node.func)
        attr = _self_attr(node.func) or self.aliases.get(name)
        if attr is not None:
            if attr in self.methods:
                self.method(attr)  # a helper method: its ops are the forward's
            elif attr in out.submodules:
                self.submodule(out.submodules[attr])
            return
        if name[:1].isupper() and "." not in name:
            out.calls[name] += 1  # `Block(...)(x)` or a helper class used inline
            return
        op = _op_of_call(node)
        if op is not None:
            out.ops[op] += 1


    def submodule(self, built_from: str) -> None:
        # `nn.Linear`: a torch module (an op); a bare `Linear` may be the repo's own class
        # or one imported from torch.nn: a call, resolved by the scan against the repo.
        short = built_from.rsplit(".", 1)[-1]
        if "." in built_from and built_from.split(".")[0] in ("nn", "torch"):
            self.result.ops[short] += 1
        else:
            self.result.calls[short] += 1


def forward_ops(cls: cst.ClassDef) -> ForwardOps:
    """Ops, submodules and class calls of `cls.forward` (helper methods followed)."""
    reader = _Reader(cls)
    reader.method("forward")
    return reader.result


def covered_op(op: str) -> bool:
    """True when the lowering handles `op` (a torch op name or an nn.Module type)."""
    return catalogue.covered(op) or op in NEUTRAL
