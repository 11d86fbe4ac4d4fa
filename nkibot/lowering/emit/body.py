"""Emit one tile's computation: loads, elementwise math, row reductions, broadcasts.

The emitter walks the ops a target needs, writes one nki line per primitive into a
Block, and remembers what it already computed. Scalars stay Python literals, every
tile is fp32 whatever the inputs' dtypes, and broadcasting (which nl ops do not do)
is explicit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from nkibot.lowering.emit import fused, rowstats
from nkibot.lowering.emit.builder import (
    Block,
    Names,
    ds,
    nl_dtype,
    offset,
    transposed_load,
)
from nkibot.lowering.frontend.ir import REDUCE, Arg, Op, Ref
from nkibot.lowering.schedule.layout import (
    COL,
    FULL,
    ONE,
    ROW,
    TOTAL,
    LayoutError,
    Placement,
    Resolved,
)

UNARY_NL = {
    "neg": "nl.negative", "abs": "nl.abs", "exp": "nl.exp", "log": "nl.log", "sqrt": "nl.sqrt",
    "rsqrt": "nl.rsqrt", "reciprocal": "nl.reciprocal", "tanh": "nl.tanh",
    "sigmoid": "nl.sigmoid", "relu": "nl.relu", "gelu": "nl.gelu",
    "gelu_tanh": "nl.gelu_apprx_tanh", "silu": "nl.silu", "softplus": "nl.softplus",
    "erf": "nl.erf", "square": "nl.square", "sign": "nl.sign", "sin": "nl.sin", "cos": "nl.cos",
    "mish": "nl.mish",
}
BINARY_NL = {
    "add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "pow": "nl.power",
    "maximum": "nl.maximum", "minimum": "nl.minimum", "gt": "nl.greater",
    "ge": "nl.greater_equal", "lt": "nl.less", "le": "nl.less_equal", "eq": "nl.equal",
    "ne": "nl.not_equal",
}
#: unary primitives the Scalar Engine runs as `nisa.activation` functions
ACTIVATIONS = {k: v for k, v in UNARY_NL.items() if k not in ("neg", "abs")}
REDUCE_NL = {"rsum": "nl.sum", "rmax": "nl.max", "rmin": "nl.min", "rprod": "nl.prod"}
COMPARE = frozenset({"gt", "ge", "lt", "le", "eq", "ne"})
#: ops whose low-precision result PyTorch rounds to the inputs' dtype, computed exactly
#: in fp32 first: run on bf16/fp16 tiles they give eager PyTorch's result bit for bit
#: longest parameter row broadcast once per kernel (fp32: 16 KiB of each partition)
HOISTED_ROW = 4096
NATIVE_OPS = frozenset({"add", "sub", "mul", "maximum", "minimum", "neg", "abs", "relu"})


def literal(value: Arg) -> str:
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    number = float(value)  # type: ignore[arg-type]
    if number != number or number in (float("inf"), float("-inf")):
        return f'float("{number}")'  # repr gives inf / nan: names no kernel defines
    return repr(number)


def _hoistable(res: Resolved, pl: Placement, name: str) -> bool:
    """Whether leaf `name` is a whole parameter row (at most HOISTED_ROW elements, outside
    a middle-dim frame) that `TileEmitter.broadcast_once` keeps on every partition."""
    view = res.views.get(name)
    frame = pl.frame
    return (view is not None and pl.kinds.get(name) == COL and not pl.outer_varies.get(name)
            and not frame.perm and not view.sliced and not view.transposed
            and math.prod(view.leaf.shape) == frame.cols and frame.cols <= HOISTED_ROW)


def hoisted_bytes(res: Resolved, pl: Placement) -> int:
    """SBUF bytes per partition the rows `broadcast_once` may hold for the whole kernel: per
    row read by a full tile, its [128, N] fp32 broadcast (the loaded [1, N] row dies with
    its statement). Counted per view, as `broadcast_once` keys them; an upper bound (an op
    that a fused form replaces may name a row never hoisted). Every form that keeps tiles
    resident counts it against its budget."""
    rows = {res.target(a.name) for op in res.ops if pl.kinds.get(op.name) == FULL
            for a in op.args if isinstance(a, Ref) and _hoistable(res, pl, res.target(a.name))}
    return len(rows) * pl.frame.cols * 4


@dataclass
class TileEmitter:
    """Computes graph values for one tile `[p, q]` at rows r0 / columns c0 of batch o."""

    res: Resolved
    pl: Placement
    block: Block
    names: Names
    final: bool = False  # True: only TOTAL values, in the kernel body after the loops
    seed: dict[str, str] = field(default_factory=dict)  # value -> existing tile variable
    totals: dict[str, str] = field(default_factory=dict)  # TOTAL value -> [1, 1] tile
    views: dict[str, str] = field(default_factory=dict)  # leaf view -> HBM view parameter
    done: dict[str, str] = field(default_factory=dict)
    used_views: list[str] = field(default_factory=list)
    used_totals: list[str] = field(default_factory=list)
    #: Computes a TOTAL value in the kernel body and returns its variable (tile mode).
    need_total: Callable[[str], str] | None = None
    #: The kernel body, where constants shared by every tile (a full iota) are built once.
    hoist: Block | None = None
    #: Where constant [128, 1] columns (an activation's bias) are built once, when not
    #: `hoist`: a block the caller places in the kernel body (a conv tail's)
    consts_at: Block | None = None
    #: modelled ns per element of the passes given to each engine so far (fused.pick)
    busy: dict[str, float] = field(default_factory=lambda: {"vector": 0.0, "scalar": 0.0})
    consts: dict[str, str] = field(default_factory=dict)  # [p, 1] bias tiles, negated rows
    partials: dict[str, str] = field(default_factory=dict)  # rsum -> its fused [p, 1] sums
    scratch: int = 0  # [p, q] tiles written only for a Scalar Engine row sum
    native: dict[str, str] = field(default_factory=dict)  # tile var -> its nl dtype if not fp32
    activations: dict[str, str] = field(default_factory=lambda: dict(ACTIVATIONS))
    #: engines for the tile's choices in order (fused.pick), a search's branch; None: greedy
    choices: tuple[str, ...] | None = None
    picked: list[str] = field(default_factory=list)  # the choices made, in order
    #: the caller tiles columns in whole multiples of `align` (or declines): a `segnorm`
    #: needs its groups whole in each tile; False: the caller's tiles are fixed otherwise
    aligned_tiles: bool = False
    align: int = 1
    _origin: str = ""
    _skipped: frozenset[str] | None = None

    def skipped(self) -> frozenset[str]:
        """Ops of this graph never emitted (rowstats: replaced by bn_stats/bn_aggr)."""
        if self._skipped is None:
            self._skipped = rowstats.replaced(self)
        return self._skipped

    def shape(self, kind: str) -> str:
        if self.final or kind in (ONE, TOTAL):
            return "(1, 1)"
        return {FULL: "(p, q)", ROW: "(p, 1)", COL: "(1, q)"}[kind]

    def kind(self, name: str) -> str:
        return self.pl.kinds[self.res.target(name)]

    def value(self, name: str) -> str:
        name = self.res.target(name)
        if name in self.seed:
            return self.seed[name]
        if name in self.done:
            return self.done[name]
        if name not in self.totals and self.pl.kinds[name] == TOTAL and not self.final:
            if self.need_total is None:
                raise LayoutError(f"value {name} is needed before its reduction finishes")
            self.totals[name] = self.need_total(name)
        if name in self.totals:
            if not self.final and self.totals[name] not in self.used_totals:
                self.used_totals.append(self.totals[name])
            return self.totals[name]
        var = self.load(name) if name in self.res.views else self.compute(name)
        self.done[name] = var
        return var

    def operand(self, arg: Arg, target_kind: str) -> str:
        if not isinstance(arg, Ref):
            return literal(arg)
        hoisted = self.broadcast_once(arg.name, target_kind)
        if hoisted:
            return hoisted
        expr = self.value(arg.name)
        if self.shape(self.kind(arg.name)) != self.shape(target_kind):
            return f"nl.broadcast_to({expr}, {self.shape(target_kind)})"
        return expr

    def broadcast_once(self, name: str, target_kind: str) -> str:
        """A parameter row (an affine weight or bias) read by full tiles, broadcast to 128
        partitions once in the kernel body instead of loaded and broadcast per tile; its
        [p, q] window is the operand. "" when it does not apply (only whole rows of at most
        HOISTED_ROW elements, outside a middle-dim frame)."""
        name = self.res.target(name)
        view = self.res.views.get(name)
        frame = self.pl.frame
        if (view is None or self.hoist is None or self.final or target_kind != FULL
                or not _hoistable(self.res, self.pl, name)):
            return ""
        key = f"row:{name}"
        if key not in self.consts:
            var = self.names.fresh(f"{view.leaf.name}_all")
            # the [1, N] row is not named: it dies once broadcast, leaving one tile per row
            # for the whole kernel (what `hoisted_bytes` counts)
            self.hoist.comment(f"{view.leaf.name} on every partition, broadcast once")
            row = (f"nl.load({view.leaf.name}.reshape((1, {frame.cols}))[0:1, 0:{frame.cols}], "
                   "dtype=nl.float32)")
            self.hoist.line(f"{var} = nl.broadcast_to({row}, (128, {frame.cols}))")
            self.used_totals.append(var)
            self.consts[key] = f"{var}[0:p, nl.ds(c0, q)]"
        return self.consts[key]

    def load(self, name: str) -> str:
        view = self.res.views[name]
        kind = self.pl.kinds[name]
        if name not in self.views:
            self.views[name] = self.names.fresh(f"{view.leaf.name}_v")
        hbm = self.views[name]
        if hbm not in self.used_views:
            self.used_views.append(hbm)
        o = "o" if self.pl.outer_varies[name] else "0"
        rows = ds("r0", "p") if kind in (FULL, ROW) else "0:1"
        cols = ds(offset("c0", view.col_start), "q") if kind in (FULL, COL) else "0:1"
        var = self.names.fresh(f"{view.leaf.name}_t")
        frame = self.pl.frame
        if frame.perm and kind == FULL and frame.rows > 1 and frame.cols > 1 and not (
                view.sliced):
            engine = fused.pick(self, dict(fused.PASS_NS))
            fused.charge(self, engine)
            transposed_load(self.block, var, hbm, o, offset("c0", view.col_start),
                            scalar=engine == "scalar")
            return var
        dtype = self.native_dtype(name)
        self.block.line(f"{var} = nl.load({hbm}[{o}, {rows}, {cols}], "
                        f"dtype={dtype or 'nl.float32'})")
        if dtype:
            self.native[var] = dtype
        return var

    def native_dtype(self, name: str) -> str | None:
        """A bf16/fp16 input stays in its dtype when every op reading it is one PyTorch
        also rounds to that dtype (NATIVE_OPS): the engines compute in fp32 inside and
        round once on writing, as eager PyTorch does, so no fp32 load and cast copy."""
        dtype = self.res.views[name].leaf.dtype
        if dtype not in ("bfloat16", "float16"):
            return None
        readers = [op for op in self.res.ops if any(
            isinstance(a, Ref) and self.res.target(a.name) == name for a in op.args)]
        if any(op.op not in NATIVE_OPS for op in readers):
            return None
        return nl_dtype(dtype)

    def origin_comment(self, op: Op) -> None:
        if op.origin and op.origin != self._origin:
            self.block.comment(op.origin)
            self._origin = op.origin

    def compute(self, name: str) -> str:
        op = next(o for o in self.res.ops if o.name == name)
        if op.op == "segnorm":
            data = op.args[0]
            assert isinstance(data, Ref)
            return rowstats.segments(self, op, self.value(data.name), self.aligned)
        found = (rowstats.moments(self, op) or fused.fused(self, op)
                 or fused.arg_extreme(self, op))
        if found is not None:
            return found
        src = op.args[0] if op.args else None
        if (op.op == "rsum" and not self.final and isinstance(src, Ref)
                and self.kind(src.name) == FULL and self.pl.kinds[op.name] == ROW):
            return fused.row_sum(self, op, self.res.target(src.name))
        # operands first (their lines precede this op's comment); the one with fewer per-row
        # ops first: those are chains of small dependent instructions that wait on other
        # engines, so the full-tile work of the other operand is issued ahead of them
        refs = [a.name for a in op.args if isinstance(a, Ref)]
        if not any(self.res.target(r) in self.res.views for r in refs):
            refs.sort(key=self.row_ops)
        for arg in refs:
            if not self.broadcast_once(arg, self.pl.kinds[op.name]):
                self.value(arg)
        self.origin_comment(op)
        var = self.names.fresh(f"{op.name}")
        if op.op in ("fill", "zeros"):
            value = float(str(op.attr("value", 0.0)))
            self.block.line(f"{var} = nl.full({self.shape(self.pl.kinds[op.name])}, {value!r}, "
                            "dtype=nl.float32, buffer=nl.sbuf)")
            return var
        if op.op == "iota":
            self.block.line(f"{var} = nl.ndarray((1, q), dtype=nl.float32, buffer=nl.sbuf)")
            self.block.line(f"nisa.iota({var}, [[1, q]], offset=c0)  # column index c0 + j")
            return var
        expr = self.expression(op)
        self.block.line(f"{var} = {expr}")
        if expr in self.native:  # a view keeps its tile's dtype
            self.native[var] = self.native[expr]
        elif op.op in NATIVE_OPS:  # bf16 op bf16 (or a literal) is bf16, rounded once
            kinds = {self.native.get(self.done.get(self.res.target(a.name), ""), "")
                     for a in op.args if isinstance(a, Ref)}
            if len(kinds) == 1 and "" not in kinds:
                self.native[var] = kinds.pop()
        tiles = [a for a in op.args if isinstance(a, Ref) and self.kind(a.name) == FULL]
        if not self.final and (tiles or self.pl.kinds[op.name] == FULL):
            fused.charge(self, "vector", min(max(len(tiles), 1), 2))  # a plain nl op: Vector
        return var

    def aligned(self, size: int) -> None:
        """Column tiles must hold whole runs of `size` columns (see `align`)."""
        if not self.aligned_tiles or self.final:
            raise LayoutError(f"groups of {size} columns normalised together need column "
                              "tiles in whole groups, which this form does not tile")
        self.align = math.lcm(self.align, size)

    def row_ops(self, name: str) -> int:
        """Per-row (ROW) ops still to emit in the computation of `name`."""
        name = self.res.target(name)
        op = None if name in self.done or name in self.seed else next(
            (o for o in self.res.ops if o.name == name), None)
        if op is None:
            return 0
        own = 1 if self.pl.kinds.get(name) == ROW else 0
        return own + sum(self.row_ops(a.name) for a in op.args if isinstance(a, Ref))

    def expression(self, op: Op) -> str:
        kind = self.pl.kinds[op.name]
        if op.op in UNARY_NL:
            return f"{UNARY_NL[op.op]}({self.operand(op.args[0], kind)})"
        if op.op in BINARY_NL:
            a, b = (self.operand(x, kind) for x in op.args)
            dtype = ", dtype=nl.float32" if op.op in COMPARE else ""
            return f"{BINARY_NL[op.op]}({a}, {b}{dtype})"
        if op.op == "where":
            c, a, b = (self.where_operand(x, kind) for x in op.args)
            return f"nl.where({c}, {a}, {b})"
        if op.op in REDUCE:
            return self.reduce(op)
        if op.op == "view":
            return self.value(op.args[0].name)  # type: ignore[union-attr]
        if op.op in ("triu", "tril"):
            return self.triangle(op)
        raise LayoutError(f"{op.origin}: no emitter for {op.op}")

    def triangle(self, op: Op) -> str:
        """torch.triu/tril of a 2-D value: keep where column - row >= (<=) the diagonal."""
        if self.final or self.pl.frame.outer > 1 or len(op.shape) != 2:
            raise LayoutError(f"{op.origin}: triu/tril of a value that is not a 2-D matrix")
        offsets = self.names.fresh(f"{op.name}_diag")
        self.block.line(f"{offsets} = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)")
        self.block.line(f"nisa.iota({offsets}, [[1, q]], offset=c0 - r0, channel_multiplier=-1)"
                        "  # column - row")
        test = "nl.greater_equal" if op.op == "triu" else "nl.less_equal"
        diagonal = float(str(op.attr("diagonal", 0)))
        keep = f"{test}({offsets}, {diagonal!r}, dtype=nl.float32)"
        return f"nl.multiply({self.operand(op.args[0], FULL)}, {keep})"

    def where_operand(self, arg: Arg, kind: str) -> str:
        if isinstance(arg, Ref):
            return self.operand(arg, kind)
        return f"nl.full({self.shape(kind)}, {literal(arg)}, dtype=nl.float32)"

    def reduce(self, op: Op) -> str:
        src = op.args[0]
        assert isinstance(src, Ref)
        if self.pl.kinds[op.name] == TOTAL and self.final:
            raise LayoutError(f"{op.origin}: whole-tensor reduction of a reduced value")
        return f"{REDUCE_NL[op.op]}({self.value(src.name)}, axis=1, keepdims=True)"
