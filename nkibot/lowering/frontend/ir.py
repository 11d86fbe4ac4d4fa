"""The lowering's op graph: plain data, no torch, so planning and emission stay pure.

`trace.py` builds a `Graph` from a torch.fx trace; composite torch ops (softmax,
layer_norm, linear, ...) are already decomposed into the primitives listed here, so
the emitters only need to know these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

UNARY: frozenset[str] = frozenset({
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "relu",
    "gelu", "gelu_tanh", "silu", "softplus", "erf", "square", "sign", "sin", "cos", "copy",
    "mish",
})
BINARY: frozenset[str] = frozenset({
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "gt", "ge", "lt", "le", "eq", "ne",
})
REDUCE: frozenset[str] = frozenset({"rsum", "rmax", "rmin", "rprod"})
OTHER: frozenset[str] = frozenset({"where", "view", "transpose", "matmul", "slice", "iota",
                                   "conv", "pool", "scan", "flip", "triu",
                                   "tril", "blocknorm", "narrow", "select",
                                   "zeros", "attention", "permute", "expand",
                                   "subscript", "fill", "gather", "cat", "segnorm"})
PRIMITIVES: frozenset[str] = UNARY | BINARY | REDUCE | OTHER


@dataclass(frozen=True)
class Ref:
    """A reference to a leaf (kernel argument) or to an op's result, by name."""

    name: str


Scalar = float | int | bool
Arg = Ref | Scalar


@dataclass(frozen=True)
class Leaf:
    """A kernel argument: a forward input or a state_dict tensor."""

    name: str  # sanitised kernel argument name
    shape: tuple[int, ...]
    dtype: str
    source: str  # "input" or "state"
    key: str  # forward argument name or state_dict key


@dataclass(frozen=True)
class Op:
    """One primitive; `attrs` holds static parameters (dims, transposes, view shapes)."""

    name: str
    op: str
    args: tuple[Arg, ...]
    shape: tuple[int, ...]
    dtype: str
    origin: str = ""
    attrs: tuple[tuple[str, object], ...] = ()

    def attr(self, key: str, default: object = None) -> object:
        return dict(self.attrs).get(key, default)

    @property
    def dims(self) -> tuple[int, ...]:
        """The reduced dims of a reduction (empty for other ops)."""
        value = self.attr("dims", ())
        return tuple(int(d) for d in value) if isinstance(value, tuple) else ()

    @property
    def start(self) -> int:
        """The first column of a slice."""
        value = self.attr("start", 0)
        return value if isinstance(value, int) else 0


@dataclass
class Graph:
    leaves: list[Leaf] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[Ref] = field(default_factory=list)
    #: Python scalar forward arguments, folded in as compile-time constants (name -> value).
    constants: dict[str, Scalar] = field(default_factory=dict)

    #: name -> leaf / op, rebuilt when the list is another or has grown (graphs are built
    #: by appending); the scheduler looks values up by name hundreds of thousands of times
    _index: dict[str, tuple[tuple[int, int], dict[str, Leaf | Op]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def _lookup(self, kind: str, items: Sequence[Leaf | Op]) -> dict[str, Leaf | Op]:
        key = (id(items), len(items))
        cached = self._index.get(kind)
        if cached is None or cached[0] != key:
            # the first of a name wins, as a scan from the front finds it
            cached = (key, {item.name: item for item in reversed(items)})
            self._index[kind] = cached
        return cached[1]

    def leaf(self, name: str) -> Leaf | None:
        found = self._lookup("leaf", self.leaves).get(name)
        return found if isinstance(found, Leaf) else None

    def op(self, name: str) -> Op | None:
        found = self._lookup("op", self.ops).get(name)
        return found if isinstance(found, Op) else None

    def shape_of(self, ref: Ref) -> tuple[int, ...]:
        found = self.leaf(ref.name) or self.op(ref.name)
        if found is None:
            raise KeyError(ref.name)
        return found.shape

    def users(self, name: str) -> list[Op]:
        return [op for op in self.ops if any(a == Ref(name) for a in op.args)]


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + shape
        for i, dim in enumerate(padded):
            if dim != 1:
                out[i] = dim
    return tuple(out)
