"""Where decompositions write primitives: names, shapes and origins for each new op."""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.lowering.frontend.ir import Arg, Graph, Op, Ref, broadcast_shape


class Unsupported(Exception):
    """Raised by a handler: the op (named like aten.conv2d.default) cannot be lowered."""

    def __init__(self, op: str, why: str = "") -> None:
        super().__init__(op)
        self.op = op
        self.why = why


@dataclass(frozen=True)
class Unlowered:
    """An output of a handler that is not computed (nn.MultiheadAttention's averaged
    weights): declined, with `op` and `why`, only where something reads it."""

    op: str
    why: str


@dataclass
class Sink:
    """Appends ops to a Graph; `origin` and `final` come from the fx node being lowered."""

    graph: Graph
    origin: str = ""
    final: str = ""  # the fx node's name: the op that produces its value takes it
    dtype: str = "float32"
    _count: int = 0

    def shape(self, value: Arg) -> tuple[int, ...]:
        return self.graph.shape_of(value) if isinstance(value, Ref) else ()

    def emit(self, op: str, *args: Arg, shape: tuple[int, ...] | None = None,
             last: bool = False, **attrs: object) -> Ref:
        if shape is None:
            shape = broadcast_shape(*(self.shape(a) for a in args))
        if last and self.final:
            name = self.final
        else:
            self._count += 1
            name = f"{self.final or 'v'}_{op}{self._count}"
        self.graph.ops.append(
            Op(name=name, op=op, args=tuple(args), shape=shape, dtype=self.dtype,
               origin=self.origin, attrs=tuple(sorted(attrs.items())))
        )
        return Ref(name)

    def part(self, tag: str) -> Sink:
        """A sink for the intermediates of one part of a composite op: its names start
        with this sink's and `tag`, so the composite's own result keeps the final name."""
        return Sink(self.graph, origin=self.origin, final=f"{self.final or 'v'}_{tag}",
                    dtype=self.dtype)

    # Arithmetic helpers that fold scalars so generated code carries no `x * 1.0`.
    def add(self, a: Arg, b: Arg, last: bool = False) -> Arg:
        if isinstance(a, int | float) and isinstance(b, int | float):
            return a + b
        if b == 0 and not last:
            return a
        return self.emit("add", a, b, last=last)

    def sub(self, a: Arg, b: Arg, last: bool = False) -> Arg:
        if isinstance(a, int | float) and isinstance(b, int | float):
            return a - b
        return self.emit("sub", a, b, last=last)

    def mul(self, a: Arg, b: Arg, last: bool = False) -> Arg:
        if isinstance(a, int | float) and isinstance(b, int | float):
            return a * b
        if b == 1 and not last:
            return a
        return self.emit("mul", a, b, last=last)

    def div(self, a: Arg, b: Arg, last: bool = False) -> Arg:
        if isinstance(b, int | float) and not isinstance(b, bool):
            return self.mul(a, 1.0 / b, last=last)
        if a == 1:
            return self.emit("reciprocal", b, last=last)
        return self.emit("mul", a, self.emit("reciprocal", b), last=last)

    def reduce(self, op: str, x: Arg, dims: tuple[int, ...], keepdim: bool,
               last: bool = False) -> Ref:
        """A reduction over `dims` (normalised); the result squeezed when not keepdim."""
        shape = self.shape(x)
        kept = tuple(1 if i in dims else d for i, d in enumerate(shape))
        out = self.emit(op, x, shape=kept, last=last and keepdim, dims=dims)
        if keepdim:
            return out
        squeezed = tuple(d for i, d in enumerate(shape) if i not in dims)
        return self.emit("view", out, shape=squeezed, last=last)

    def mean(self, x: Arg, dims: tuple[int, ...], keepdim: bool, last: bool = False) -> Arg:
        shape = self.shape(x)
        count = 1
        for d in dims:
            count *= shape[d]
        total = self.reduce("rsum", x, dims, True)
        mean = self.mul(total, 1.0 / count, last=last and keepdim)
        if keepdim:
            return mean
        squeezed = tuple(d for i, d in enumerate(shape) if i not in dims)
        return self.emit("view", mean, shape=squeezed, last=last)


def norm_dims(dim: object, rank: int) -> tuple[int, ...]:
    """torch's dim argument (None, int, list) as sorted non-negative ints."""
    if dim is None or dim == () or dim == []:
        return tuple(range(rank))
    items = dim if isinstance(dim, list | tuple) else [dim]
    return tuple(sorted({int(str(d)) % max(rank, 1) for d in items}))
