"""A tiny source builder: indented lines, fresh names, and the nki spellings we use."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nkibot.lowering.schedule.tiling import PMAX as PMAX  # re-exported: the emitters' spelling

NL_DTYPES = {
    "float32": "nl.float32", "bfloat16": "nl.bfloat16", "float16": "nl.float16",
    "int8": "nl.int8", "int16": "nl.int16", "int32": "nl.int32", "uint8": "nl.uint8",
    "bool": "nl.uint8", "int64": "nl.int32",
}


def nl_dtype(dtype: str) -> str:
    return NL_DTYPES.get(dtype, "nl.float32")


@dataclass
class Block:
    """Lines of one function body (or the module), with the current indent."""

    lines: list[str] = field(default_factory=list)
    depth: int = 0

    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text: str) -> None:
        self.line(f"# {text}")

    def indent(self) -> None:
        self.depth += 1

    def dedent(self) -> None:
        self.depth -= 1


@dataclass
class Names:
    """Fresh identifiers, never repeating one already handed out."""

    taken: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name


def ds(start: str, size: int | str) -> str:
    """An index expression: a static slice where possible, nl.ds otherwise."""
    if start.isdigit() and isinstance(size, int):
        return f"{start}:{int(start) + size}"
    return f"nl.ds({start}, {size})"


def offset(base: str, extra: int) -> str:
    if extra == 0:
        return base
    if base.isdigit():
        return str(int(base) + extra)
    return f"{base} + {extra}"


@dataclass(frozen=True)
class Axis:
    """One tiled dimension of a launch grid: loop variable, extent and tile size."""

    var: str
    extent: int
    tile: int

    @property
    def full(self) -> int:
        return self.extent // self.tile

    @property
    def rem(self) -> int:
        return self.extent % self.tile


def emit_grid(block: Block, axes: list[Axis], call: str, loop: str,
              bound: dict[str, tuple[str, int]] | None = None,
              index: tuple[str, ...] | None = None) -> None:
    """Nested loops over full tiles plus one static remainder per axis.

    `call` is formatted with `{var}0` (start expression) and `{var}sz` (static size) for
    every axis. Remainders are separate calls with constant bounds, so no `min()` is
    ever computed on a loop variable. With `index` (() to start), `{t}` is the tile's
    row-major number in the grid (affine in the loop variables), e.g. a column to write.
    """
    bound = dict(bound or {})
    if not axes:
        fields = {}
        for var, (start, size) in bound.items():
            fields[f"{var}0"], fields[f"{var}sz"] = start, str(size)
        if index is not None:
            fields["t"] = " + ".join(index) or "0"
        block.line(call.format(**fields))
        return
    axis, rest = axes[0], axes[1:]
    stride = math.prod(a.full + (1 if a.rem else 0) for a in rest)
    scaled = f" * {stride}" if stride > 1 else ""

    def at(term: str | None) -> tuple[str, ...] | None:
        return None if index is None else (*index, *([term] if term else []))
    if axis.full == 1:
        emit_grid(block, rest, call, loop, {**bound, axis.var: ("0", axis.tile)}, at(None))
    elif axis.full > 1:
        block.line(f"for {axis.var} in nl.{loop}({axis.full}):")
        block.indent()
        emit_grid(block, rest, call, loop, {**bound, axis.var: (f"{axis.var} * {axis.tile}",
                                                               axis.tile)},
                  at(f"{axis.var}{scaled}"))
        block.dedent()
    if axis.rem:
        emit_grid(block, rest, call, loop,
                  {**bound, axis.var: (str(axis.full * axis.tile), axis.rem)},
                  at(str(axis.full * stride) if axis.full else None))


def transposed_load(block: Block, var: str, hbm: str, o: str, c0: str,
                    scalar: bool = False) -> None:
    """[p, q] tile `var` from a natural [q, p] HBM window: 128-column blocks via the PE.

    `scalar`: the PSUM -> SBUF copies run on the Scalar Engine (an activation copy), when
    the Vector Engine has more to do.
    """
    block.comment("stored with the reduced dim outermost: load [cols, rows] blocks, "
                  "transpose each on the Tensor Engine")
    block.line(f"{var} = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)")
    block.line(f"for cb in range((q + {PMAX - 1}) // {PMAX}):")
    block.line(f"    w = min({PMAX}, q - cb * {PMAX})")
    block.line(f"    nat = nl.load({hbm}[{o}, nl.ds({c0} + cb * {PMAX}, w), nl.ds(r0, p)], "
               "dtype=nl.float32)")
    block.line("    flip = nl.ndarray((p, w), dtype=nl.float32, buffer=nl.psum)")
    block.line("    nisa.nc_transpose(flip, nat)")
    if scalar:
        block.line(f"    nisa.activation(dst={var}[0:p, nl.ds(cb * {PMAX}, w)], op=nl.copy, "
                   "data=flip)")
    else:
        block.line(f"    nisa.tensor_copy(dst={var}[0:p, nl.ds(cb * {PMAX}, w)], src=flip)")


def transposed_store(block: Block, value: str, hbm: str, o: str, dtype: str) -> None:
    """Store a [p, q] tile into a natural [q, p] HBM window, transposing 128-column blocks."""
    block.comment("stored with the reduced dim outermost: transpose [rows, cols] blocks back")
    block.line(f"for cb in range((q + {PMAX - 1}) // {PMAX}):")
    block.line(f"    w = min({PMAX}, q - cb * {PMAX})")
    block.line("    flip = nl.ndarray((w, p), dtype=nl.float32, buffer=nl.psum)")
    block.line(f"    nisa.nc_transpose(flip, {value}[0:p, nl.ds(cb * {PMAX}, w)])")
    block.line(f"    nat = nl.ndarray((w, p), dtype={dtype}, buffer=nl.sbuf)")
    block.line("    nisa.tensor_copy(dst=nat, src=flip)")
    block.line(f"    nl.store({hbm}[{o}, nl.ds(c0 + cb * {PMAX}, w), nl.ds(r0, p)], nat)")
