"""A convolution's pointwise tail, fused into its eviction: the ops after the conv (and after
its eviction's own steps) that the eviction does not take, run on the evicted SBUF tile.

The tile `[channels, positions]` is one tile of the frame (N, C, positions) of the conv's
output: a per-channel parameter (C, 1, 1) is a per-partition column (ROW), a scalar is a
literal or a (1, 1) tile, and a tensor of the output's shape (a residual) is loaded at the
tile's own positions, which only a tile of whole rows (every dim after the first complete)
can name as one column range. The row emitter (body.TileEmitter) writes the ops into a helper
that takes the tile and returns the result in the output's dtype, so the conv's value never
round-trips through HBM: without it a conv followed by, say, a HardSwish wrote its output,
read it back and wrote it again (three times the output's bytes instead of one).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from nkibot.lowering.emit.body import TileEmitter
from nkibot.lowering.emit.builder import Block, Names, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output, view_definition
from nkibot.lowering.frontend.ir import Op
from nkibot.lowering.schedule.layout import (
    COL,
    FULL,
    Frame,
    LayoutError,
    Resolved,
    place,
)

#: Names the conv emitters use in their helpers and views (the tail's must differ).
CONV_NAMES = frozenset({
    "x_v", "w_v", "b_v", "out_v", "r_v", "x_sb", "w_sb", "b_sb", "n", "g", "c0", "csz", "acc",
    "res", "b_t", "st", "y", "r_t", "fin", "t", "o", "r0", "p", "q", "z0", "y0", "rows", "cols",
    "diag", "ident", "plane", "flat_t", "row_ps", "tp", "col", "row", "cb", "w",
})


@dataclass(frozen=True)
class TailCall:
    """The tail's helper: `fn(t, *views, o, r0, p, c0, q)` returns the output tile for the
    [p, q] tile `t` of channels r0.. of batch element o (positions c0.. when `indexed`)."""

    fn: str
    views: tuple[str, ...]  # kernel-level HBM views the helper reads, passed down to it
    indexed: bool  # reads tensors of the output's shape: needs the tile's position range
    #: modelled ns per element the tail gives each engine (the eviction's engine follows)
    busy: tuple[tuple[str, float], ...] = ()

    def call(self, sizes: list[str], channel: str, flat: str | None) -> list[str]:
        """Lines (in a tile helper, with `res` [csz, *sizes] evicted, fp32) that replace
        `res` by the tail's result; `flat`: the tile's first flattened position, None when
        its positions are no single range."""
        if self.indexed and flat is None:
            raise LayoutError("a tensor of the conv output's shape in its tail, on tiles that "
                              "are not whole rows (staged instead)")
        q = " * ".join(sizes)
        args = ", ".join([f"res.reshape((csz, {q}))", *self.views, "n", channel, "csz",
                          flat if self.indexed and flat is not None else "0", q])
        return [f"fin = {self.fn}({args})",
                f"res = fin.reshape((csz, {', '.join(sizes)}))"]


def emit_tail(res: Resolved, kernel: Kernel, conv: Op, chain: list[str], ops: tuple[Op, ...],
              out: Output, shape: tuple[int, ...] | None = None,
              before: dict[str, float] | None = None) -> TailCall:
    """The helper computing `out` from the chain's last value over `ops` (LayoutError when a
    value does not fit the frame, e.g. a reduction or a tensor varying along positions only);
    `shape`: the frame's, when not the conv output's (a global pool's result); `before`:
    the engines' load from the tile's eviction, which the tail's engine choices balance
    against (modelled ns per element; not counted in the TailCall's `busy`)."""
    frame_shape = tuple(shape or conv.shape)
    if len(frame_shape) < 3:
        raise LayoutError("a tail after a convolution without positions")
    frame = Frame(frame_shape, 1, 2)
    # values outside the tail (the chain; a global pool's other side) are placed already
    outside = [op.name for op in res.ops if op not in ops]
    pl = place(res, frame, [out.name], seed=dict.fromkeys([*chain, *outside], FULL))
    if pl.kinds.get(res.target(out.name)) != FULL:
        raise LayoutError(f"{out.name}: a tail whose result is not the conv output's shape")
    seeded = {"vector": 0.0, "scalar": 0.0, **(before or {})}

    def emit(choices: tuple[str, ...]) -> TileEmitter:
        """One emission of the tail, on copies of the kernel's names and views."""
        names = Names(set(kernel.names.taken) | CONV_NAMES)
        tile = TileEmitter(res, pl, Block(depth=1), names, seed={chain[-1]: "t"},
                           views=dict(kernel.leaf_views), choices=choices,
                           consts_at=Block(depth=kernel.body.depth))
        tile.busy = dict(seeded)
        tile.value(out.name)
        return tile

    tile = balanced(emit)
    kernel.leaf_views.update(tile.views)
    assert tile.consts_at is not None
    kernel.body.lines += tile.consts_at.lines  # its constant columns, built once
    blk, names, value = tile.block, tile.names, tile.value(out.name)  # value(): memoised
    if value == "t":
        raise LayoutError("an empty tail")
    if out.dtype != "float32":
        blk.line(f"out_cast = nl.copy({value}, dtype={nl_dtype(out.dtype)})")
        value = "out_cast"
    blk.line(f"return {value}")
    kernel.names.taken |= names.taken
    for name, param in tile.views.items():
        if param not in kernel.hbm_views:
            kernel.hbm_views[param] = view_definition(res, pl, name)
            kernel.body.line(f"{param} = {kernel.hbm_views[param]}")
    indexed = any(pl.kinds[name] in (FULL, COL) for name in tile.views)
    fn = kernel.names.fresh("conv_tail")
    params = [*tile.used_views, *tile.used_totals]
    origins = ", ".join(dict.fromkeys(op.origin or op.op for op in ops))
    kernel.helpers.append([
        f"def {fn}({', '.join(['t', *params, 'o', 'r0', 'p', 'c0', 'q'])}):",
        f'    """{origins} on the {"pooled" if shape else "evicted"} [p, q] tile t: channels '
        'r0..r0+p of batch element o' + (", positions c0..c0+q" if indexed and not shape else "")
        + '."""', *blk.lines])
    own = {engine: ns - seeded.get(engine, 0.0) for engine, ns in tile.busy.items()}
    return TailCall(fn, tuple(params), indexed, tuple(sorted(own.items())))


#: Engine assignments a tail's search tries at most (2 engines a flexible op: 6 ops).
SEARCH_LIMIT = 64


def balanced(emit: Callable[[tuple[str, ...]], TileEmitter]) -> TileEmitter:
    """The emission whose engine choices (fused.pick, each Vector or Scalar) finish the
    tile soonest: the least max over engines of the modelled busy time, then the least
    total. Greedy choice by choice, a pass given to the Scalar Engine early can leave the
    Vector Engine three passes later (level 2 71: a divide on the Scalar Engine, then a
    leaky ReLU's three on the Vector Engine, or all four on the Vector Engine after a
    Scalar Engine eviction). Depth first over the choices, each emission greedy after
    its prefix; at most SEARCH_LIMIT emissions."""
    def score(em: TileEmitter) -> tuple[float, float]:
        return max(em.busy.values()), sum(em.busy.values())

    best: TileEmitter | None = None
    stack: list[tuple[str, ...]] = [()]
    tried = 0
    while stack and tried < SEARCH_LIMIT:
        prefix = stack.pop()
        em = emit(prefix)
        tried += 1
        if best is None or score(em) < score(best):
            best = em
        for i in range(len(prefix), len(em.picked)):
            other = "scalar" if em.picked[i] == "vector" else "vector"
            stack.append((*em.picked[:i], other))
    assert best is not None
    return best


def flat_start(dims_out: list[int], tiles: list[int], first: str) -> str | None:
    """The first flattened position of a tile starting at `first` of dim 0, when every
    later dim is whole (else None: its positions are no single range)."""
    if any(t < d for t, d in zip(tiles[1:], dims_out[1:], strict=True)):
        return None
    inner = math.prod(dims_out[1:])
    return f"({first}) * {inner}" if inner > 1 else first
