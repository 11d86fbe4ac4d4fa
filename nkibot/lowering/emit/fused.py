"""Fused Vector/Scalar Engine instructions for one tile of an elementwise/row graph.

A FULL `[p, q]` value computed from one FULL tile and per-row (`[p, 1]`) or literal
operands is a `Chain` of steps on that tile. Instead of one `nl` op per primitive (each
a full pass, a `[p, 1]` operand first broadcast to `[p, q]`: another pass), a chain of up
to two steps is one `nisa.tensor_scalar` (Vector Engine) or, when it is affine
(`x * scale + bias`), one `nisa.activation(copy)` (Scalar Engine). An activation function
absorbs the affine chain under it (`exp(x - max)` is `activation(exp, x, bias=-max)`), and
a row sum of its result is its `reduce_res` (free). A binary op of two FULL tiles takes a
one-step operand into `nisa.scalar_tensor_tensor`. Where either engine could run a pass,
the one with less work so far in this tile gets it (`TileEmitter.busy`, charged once per
instruction written), so the Vector and Scalar engines run in parallel; a conv's tail
searches its choices as a whole instead (`convtail.balanced`), against the eviction's and
a fused pool's load. Pass costs are the cost model's (`nkibot.sim.cost.quick`,
trn1): a Vector pass over N elements is N cycles at its clock (2N with two tile inputs), a
Scalar pass N at its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from nkibot.lowering.emit.builder import PMAX, Block, Names
from nkibot.lowering.frontend.ir import Arg, Op, Ref
from nkibot.lowering.schedule.layout import FULL, ONE, ROW, TOTAL, Placement, Resolved
from nkibot.sim.cost import quick

TS_OPS = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply",
          "maximum": "nl.maximum", "minimum": "nl.minimum", "gt": "nl.greater",
          "ge": "nl.greater_equal", "lt": "nl.less", "le": "nl.less_equal", "eq": "nl.equal",
          "ne": "nl.not_equal"}
#: unary primitives that are not Scalar Engine activation functions
VECTOR_UNARY = frozenset({"abs", "neg"})
HOISTED_IOTA = 8192  # widest full iota built once in the kernel body (32 KiB a partition)
#: ns per element per partition of one pass (the cost model's, trn1 fp32)
PASS_NS = {"vector": quick.pass_ns("vector"), "scalar": quick.pass_ns("scalar")}


class TileEmitter(Protocol):
    """What fusing reads and writes of the tile being emitted (`body.TileEmitter` is one):
    the graph, its placement, the tile's code and names, and the per-tile bookkeeping."""

    res: Resolved
    pl: Placement
    block: Block
    names: Names
    final: bool
    seed: dict[str, str]
    done: dict[str, str]
    used_totals: list[str]
    hoist: Block | None
    consts_at: Block | None
    busy: dict[str, float]
    consts: dict[str, str]
    partials: dict[str, str]
    scratch: int
    native: dict[str, str]
    activations: dict[str, str]
    choices: tuple[str, ...] | None
    picked: list[str]

    def kind(self, name: str) -> str: ...

    def value(self, name: str) -> str: ...

    def operand(self, arg: Arg, target_kind: str) -> str: ...

    def origin_comment(self, op: Op) -> None: ...

    def skipped(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class Step:
    """`tile op operand` (`operand op tile` when reverse): operand a literal or a ROW value."""

    op: str
    operand: Arg
    reverse: bool


#: An affine form's scale or bias: a literal, or (ROW value, negated).
Coef = float | tuple[str, bool]


def _op(em: TileEmitter, name: str) -> Op | None:
    return next((o for o in em.res.ops if o.name == name), None)


def users(em: TileEmitter, name: str) -> list[Op]:
    return [op for op in em.res.ops
            if any(isinstance(a, Ref) and em.res.target(a.name) == name for a in op.args)]


def single_use(em: TileEmitter, name: str) -> bool:
    """Only one op reads `name`, it is no output and not computed yet: it may be fused."""
    outputs = {em.res.target(r.name) for r in em.res.graph.outputs}
    return (name not in outputs and name not in em.done and name not in em.seed
            and _op(em, name) is not None
            # a reader already done, or one that is never emitted (rowstats: the squares of
            # a centred value whose variance comes from bn_aggr), does not count
            and len([u for u in users(em, name)
                     if u.name not in em.done and u.name not in em.skipped()]) == 1)


def full_kind(em: TileEmitter, name: str) -> bool:
    """A FULL value, or column indices (an iota) that may be generated as a [p, q] tile."""
    op = _op(em, em.res.target(name))
    return em.kind(name) == FULL or (op is not None and op.op == "iota")


def full_value(em: TileEmitter, name: str) -> str:
    """`name` as a [p, q] tile: an iota is generated at full size (no partition broadcast)."""
    op = _op(em, name)
    if op is None or op.op != "iota" or em.kind(name) == FULL:
        return em.value(name)
    key = f"iota:{name}"
    cols = em.pl.frame.cols
    if key not in em.consts and em.hoist is not None and cols <= HOISTED_IOTA:
        # the same [128, cols] column indices serve every tile: built once, sliced
        var = em.names.fresh(f"{name}_all")
        em.hoist.comment(f"column indices 0..{cols - 1} on every partition (built once)")
        em.hoist.line(f"{var} = nl.ndarray((128, {cols}), dtype=nl.float32, buffer=nl.sbuf)")
        em.hoist.line(f"nisa.iota({var}, [[1, {cols}]], offset=0)")
        em.used_totals.append(var)
        em.consts[key] = f"{var}[0:p, nl.ds(c0, q)]"
    elif key not in em.consts:
        var = em.consts[key] = tile_var(em, name, f"{name}_full")
        em.block.line(f"nisa.iota({var}, [[1, q]], offset=c0)  # column index c0 + j, every row")
    return em.consts[key]


def step_of(em: TileEmitter, op: Op | None) -> tuple[str, Step] | None:
    """(the FULL operand, the step) of a FULL op with one literal or ROW operand."""
    if op is None or em.final or op.op not in TS_OPS or em.pl.kinds[op.name] != FULL:
        return None
    tiles = [i for i, a in enumerate(op.args) if isinstance(a, Ref) and full_kind(em, a.name)]
    if len(op.args) != 2 or len(tiles) != 1:
        return None
    other = op.args[1 - tiles[0]]
    if isinstance(other, Ref) and em.kind(other.name) not in (ROW, TOTAL, ONE):
        return None
    full = op.args[tiles[0]]
    assert isinstance(full, Ref)
    return em.res.target(full.name), Step(op.op, other, reverse=tiles[0] == 1)


def chain(em: TileEmitter, name: str, limit: int = 2) -> tuple[str, list[Step]] | None:
    """The FULL base and up to `limit` steps computing `name`, inner steps fused when single-use."""
    found = step_of(em, _op(em, name))
    if found is None:
        return None
    base, steps = found[0], [found[1]]
    while len(steps) < limit and single_use(em, base):
        inner = step_of(em, _op(em, base))
        if inner is None:
            break
        base, steps = inner[0], [inner[1], *steps]
    return base, steps


def affine(steps: list[Step]) -> tuple[Coef, Coef] | None:
    """(scale, bias) with steps(x) == x * scale + bias, or None when not representable.

    Literal steps compose at compile time; a ROW operand may be the scale (on an
    untouched tile) or the bias (possibly negated, when none was added yet).
    """
    scale: Coef = 1.0
    bias: Coef = 0.0
    for step in steps:
        if step.op not in ("add", "sub", "mul"):
            return None
        row = step.operand.name if isinstance(step.operand, Ref) else None
        value = 0.0 if row is not None else float(step.operand)  # type: ignore[arg-type]
        if step.op == "mul" and row is not None:
            if scale != 1.0 or bias != 0.0:
                return None
            scale = (row, False)
            continue
        if isinstance(scale, tuple) or isinstance(bias, tuple):
            return None  # literal arithmetic on a ROW coefficient needs a [p, 1] op
        if step.op == "mul":
            scale, bias = scale * value, bias * value
            continue
        if step.reverse and step.op == "sub":  # c - t: negate, then add c
            scale, bias = -scale, -bias
        negate = step.op == "sub" and not step.reverse
        if row is not None:
            if bias != 0.0:
                return None
            bias = (row, negate)
        else:
            bias += -value if negate else value
    return scale, bias


def pick(em: TileEmitter, costs: dict[str, float]) -> str:
    """The engine that would finish this tile's work so far soonest with this pass added.

    It charges nothing: the instruction written charges its engine (`charge`), once. A
    search (convtail.balanced) replays a prefix of `em.choices` instead.
    """
    engine = min(costs, key=lambda e: em.busy[e] + costs[e])
    if len(costs) > 1:
        i = len(em.picked)
        if em.choices is not None and i < len(em.choices) and em.choices[i] in costs:
            engine = em.choices[i]
        em.picked.append(engine)
    return engine


def charge(em: TileEmitter, engine: str, passes: float = 1.0) -> None:
    em.busy[engine] += passes * PASS_NS[engine]


def tile_var(em: TileEmitter, name: str, base: str = "") -> str:
    """A new [p, q] fp32 tile for op `name`'s result, under the op's origin comment."""
    op = _op(em, name)
    if op is not None:
        em.origin_comment(op)
    var = em.names.fresh(base or name)
    em.block.line(f"{var} = nl.ndarray((p, q), dtype=nl.float32, buffer=nl.sbuf)")
    return var


def coef(em: TileEmitter, c: Coef | str, bias: bool) -> str | None:
    """The activation argument for a scale or bias (a bias must be a [p, 1] tile on trn1)."""
    if isinstance(c, str):
        return c
    if isinstance(c, tuple):
        var = em.operand(Ref(c[0]), ROW)
        if not c[1]:
            return var
        key = f"-{var}"
        if key not in em.consts:
            neg = em.consts[key] = em.names.fresh(f"{c[0]}_neg")
            em.block.line(f"{neg} = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
            # on the Scalar Engine, which runs the activation that reads it
            em.block.line(f"nisa.activation(dst={neg}, op=nl.copy, data={var}, scale=-1.0)")
        return em.consts[key]
    if not bias:
        return repr(c)
    if c == 0.0:
        return None
    key = repr(c)
    if key in em.consts:
        return em.consts[key]
    var = em.names.fresh("bias")
    where = em.consts_at if em.consts_at is not None else em.hoist
    if where is None or em.final:
        em.block.line(f"{var} = nl.full((p, 1), {c!r}, dtype=nl.float32, buffer=nl.sbuf)")
        em.consts[key] = var
        return var
    # built once in the kernel body and passed down: a per-tile fill is an instruction on
    # the Vector Engine that the tile's activation waits for, queued behind the previous
    # tile's Vector work (level 2 57: 1128 -> 1069 us, model estimate trn1)
    where.line(f"{var} = nl.full(({PMAX}, 1), {c!r}, dtype=nl.float32, buffer=nl.sbuf)")
    em.used_totals.append(var)
    em.consts[key] = f"{var}[0:p, 0:1]"
    return em.consts[key]


def activation(em: TileEmitter, name: str, func: str, data: str, scale: Coef | str = 1.0,
               bias: Coef | str = 0.0) -> str:
    """`dst = func(data * scale + bias)` on the Scalar Engine; a row sum of dst rides along."""
    scale_arg, bias_arg = coef(em, scale, False), coef(em, bias, True)
    var = tile_var(em, name)
    args = [f"dst={var}", f"op={func}", f"data={data}"]
    if bias_arg is not None:
        args.append(f"bias={bias_arg}")
    if scale_arg != "1.0":
        args.append(f"scale={scale_arg}")
    total = next((op for op in users(em, name) if op.op == "rsum" and op.name not in em.done
                  and op.name not in em.partials
                  and em.pl.kinds[op.name] in (ROW, TOTAL)), None)
    if total is not None:
        part = em.names.fresh(f"{total.name}_part")
        em.block.line(f"{part} = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        args += ["reduce_op=nl.add", f"reduce_res={part}"]
        em.partials[total.name] = part
    em.block.line(f"nisa.activation({', '.join(args)})")
    charge(em, "scalar")
    return var


def operand(em: TileEmitter, step: Step) -> str:
    if isinstance(step.operand, Ref):
        return em.operand(step.operand, ROW)  # a [p, 1] column (a total broadcast to one)
    return repr(float(step.operand))  # type: ignore[arg-type,unused-ignore]


def tensor_scalar(em: TileEmitter, name: str, base: str, steps: list[Step]) -> str:
    data = full_value(em, base)
    args = []
    for i, (step, scalar) in enumerate(zip(steps, [operand(em, s) for s in steps],
                                           strict=True)):
        args += [f"op{i}={TS_OPS[step.op]}", f"operand{i}={scalar}"]
        if step.reverse:
            args.append(f"reverse{i}=True")
    var = tile_var(em, name)
    em.block.line(f"nisa.tensor_scalar(dst={var}, data={data}, {', '.join(args)})")
    charge(em, "vector")
    return var


def fused(em: TileEmitter, op: Op) -> str | None:
    """The variable of `op` computed by one fused instruction, or None (emit it plainly)."""
    if em.final or em.pl.kinds[op.name] != FULL:
        return None
    if op.op in em.activations:
        return _activation_op(em, op, em.activations[op.op])
    if op.op == "mul" and _squares(em, op) and "square" in em.activations:
        # x * x is one Scalar Engine pass (activation square, N cycles; a row sum rides
        # along) where a two-input multiply is 2N on the Vector Engine
        return _activation_op(em, op, em.activations["square"])
    if op.op not in TS_OPS:
        return None
    found = chain(em, op.name)
    relu = step_of(em, op)
    # max(t, 0) is relu(t): the Scalar Engine may take it, with t's affine chain, in one
    # pass where the Vector Engine takes two steps a tensor_scalar
    if relu is not None and relu[1] == Step("maximum", 0.0, relu[1].reverse) and pick(em, {
            "vector": PASS_NS["vector"] * math.ceil((1 + _affine_steps(em, op)) / 2),
            "scalar": PASS_NS["scalar"]}) == "scalar":
        return _activation_op(em, op, "nl.relu")
    if found is not None:
        base, steps = found
        form = affine(steps)
        centred = _centred(em, steps) if form is None else None
        costs = {"vector": PASS_NS["vector"]}
        if form is not None or centred is not None:
            costs["scalar"] = PASS_NS["scalar"]
        if pick(em, costs) == "scalar":
            if form is not None:
                return activation(em, op.name, "nl.copy", full_value(em, base), *form)
            if centred is not None:
                return activation(em, op.name, "nl.copy", full_value(em, base),
                                  *_centred_form(em, op.name, *centred))
        return tensor_scalar(em, op.name, base, steps)
    return _scalar_tensor_tensor(em, op)


def _centred(em: TileEmitter, steps: list[Step]) -> tuple[Ref, Ref] | None:
    """(m, r) when the steps are (x - m) * r with ROW values m and r: a normalisation."""
    if len(steps) != 2 or [(s.op, s.reverse) for s in steps] != [("sub", False), ("mul", False)]:
        return None
    m, r = steps[0].operand, steps[1].operand
    if not (isinstance(m, Ref) and isinstance(r, Ref)):
        return None
    return (m, r) if em.kind(m.name) == ROW and em.kind(r.name) == ROW else None


def _centred_form(em: TileEmitter, name: str, m: Ref, r: Ref) -> tuple[str, str]:
    """(x - m) * r as x * r + (-m * r): the [p, 1] bias costs one tiny instruction, and the
    whole normalisation is one Scalar Engine pass."""
    mv, rv = em.operand(m, ROW), em.operand(r, ROW)
    bias = em.names.fresh(f"{name}_bias")
    em.block.line(f"{bias} = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    em.block.line(f"nisa.scalar_tensor_tensor(dst={bias}, data={mv}, op0=nl.multiply, "
                  f"operand0=-1.0, op1=nl.multiply, operand1={rv})")
    return rv, bias


def _squares(em: TileEmitter, op: Op) -> bool:
    """`x * x` of one FULL value."""
    if len(op.args) != 2:
        return False
    a, b = op.args
    return (isinstance(a, Ref) and isinstance(b, Ref)
            and em.res.target(a.name) == em.res.target(b.name) and em.kind(a.name) == FULL)


def _absorbed(em: TileEmitter, op: Op) -> tuple[str, tuple[str, list[Step]] | None]:
    """Op's input, and its affine chain (base, steps) when an activation of op absorbs it."""
    arg = next(a for a in op.args if isinstance(a, Ref))
    base = em.res.target(arg.name)
    found = chain(em, base) if single_use(em, base) else None
    return base, (found if found is not None and affine(found[1]) is not None else None)


def _affine_steps(em: TileEmitter, op: Op) -> int:
    """How many affine steps `_activation_op` folds into the activation for op's input."""
    found = _absorbed(em, op)[1]
    return len(found[1]) if found is not None else 0


def _activation_op(em: TileEmitter, op: Op, func: str) -> str:
    base, found = _absorbed(em, op)
    if found is not None:
        form = affine(found[1])
        assert form is not None
        return activation(em, op.name, func, full_value(em, found[0]), *form)
    return activation(em, op.name, func, em.value(base))


def _scalar_tensor_tensor(em: TileEmitter, op: Op) -> str | None:
    """`(a op0 s) op1 b` for a binary op of two FULL tiles whose operand a is one step."""
    if len(op.args) != 2 or not all(isinstance(a, Ref) and em.kind(a.name) == FULL
                                    for a in op.args):
        return None
    names = [em.res.target(a.name) for a in op.args]  # type: ignore[union-attr]
    for i, name in enumerate(names):
        found = step_of(em, _op(em, name)) if single_use(em, name) else None
        if found is None or names[1 - i] == name:
            continue
        base, step = found
        other, data, scalar = em.value(names[1 - i]), full_value(em, base), operand(em, step)
        var = tile_var(em, op.name)
        em.block.line(
            f"nisa.scalar_tensor_tensor(dst={var}, data={data}, op0={TS_OPS[step.op]}, "
            f"operand0={scalar}, reverse0={step.reverse}, op1={TS_OPS[op.op]}, "
            f"operand1={other}, reverse1={i == 1})")
        charge(em, "vector", 2)
        return var
    return None


def row_sum(em: TileEmitter, op: Op, src: str) -> str:
    """A FULL value's row sums `[p, 1]`: fused already, or on the less busy engine."""
    if op.name in em.partials:
        return em.partials[op.name]
    value = em.value(src)
    if op.name in em.partials:
        return em.partials[op.name]
    part = em.names.fresh(f"{op.name}_part")
    # the Scalar Engine's form writes a [p, q] scratch tile (one more live tile against the
    # budget): it takes the sum only from a busier Vector Engine
    if pick(em, {"vector": PASS_NS["vector"], "scalar": PASS_NS["vector"]}) == "vector":
        em.origin_comment(op)
        em.block.line(f"{part} = nl.sum({value}, axis=1, keepdims=True)")
        charge(em, "vector")
        return part
    scratch = tile_var(em, op.name, f"{op.name}_copy")
    em.scratch += 1
    em.block.line(f"{part} = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    em.block.line(f"nisa.activation(dst={scratch}, op=nl.copy, data={value}, "
                  f"reduce_op=nl.add, reduce_res={part})")
    charge(em, "scalar")
    return part


def _arg_parts(em: TileEmitter, op: Op) -> tuple[str, str] | None:
    """(x, rmax | rmin) of `rmin(where(x == peak(x), iota, L))`: an argmax/argmin row."""
    if em.final or op.op != "rmin" or em.pl.kinds[op.name] != ROW or not em.pl.col_reduce:
        return None
    where = _op(em, em.res.target(op.args[0].name)) if isinstance(op.args[0], Ref) else None
    if where is None or where.op != "where" or not isinstance(where.args[0], Ref):
        return None
    hit, index = _op(em, em.res.target(where.args[0].name)), where.args[1]
    if hit is None or hit.op != "eq" or not isinstance(index, Ref) or not all(
            isinstance(a, Ref) for a in hit.args) or _op(em, em.res.target(index.name)) is None:
        return None
    x, peak = (em.res.target(a.name) for a in hit.args)  # type: ignore[union-attr]
    peak_op = _op(em, peak)
    if (peak_op is None or peak_op.op not in ("rmax", "rmin") or peak_op.args[0] != Ref(x)
            or em.kind(x) != FULL or not 8 <= em.pl.frame.cols <= 16384):
        return None
    return x, peak_op.op


def arg_extreme(em: TileEmitter, op: Op) -> str | None:
    """argmax/argmin along the (whole) row: `nisa.max8` then `nisa.nc_find_index8`.

    Two Vector passes instead of a max, a compare, a select and a min (with their
    broadcasts); find_index8 returns the first occurrence, as PyTorch does.
    """
    found = _arg_parts(em, op)
    if found is None:
        return None
    x, peak = found
    data = em.value(x)
    em.origin_comment(op)
    if peak == "rmin":  # the first minimum of x is the first maximum of -x
        data = activation(em, op.name, "nl.copy", data, -1.0)
        em.scratch += 1
    em.block.comment("the row's 8 largest values, then the first index of the largest")
    top, index, var = (em.names.fresh(f"{op.name}_{s}") for s in ("top8", "index8", "index"))
    em.block.line(f"{top} = nl.ndarray((p, 8), dtype=nl.float32, buffer=nl.sbuf)")
    em.block.line(f"nisa.max8(dst={top}, src={data})")
    em.block.line(f"{index} = nl.ndarray((p, 8), dtype=nl.uint32, buffer=nl.sbuf)")
    em.block.line(f"nisa.nc_find_index8(dst={index}, data={data}, vals={top})")
    dtype = "nl.int32" if _only_stored(em, op.name) else "nl.float32"
    em.block.line(f"{var} = nl.ndarray((p, 1), dtype={dtype}, buffer=nl.sbuf)")
    em.block.line(f"nisa.tensor_copy(dst={var}, src={index}[0:p, 0:1])")
    em.native[var] = dtype
    charge(em, "vector", 2)
    return var


def _only_stored(em: TileEmitter, name: str) -> bool:
    """`name` reaches only outputs (through views): it may be computed as int32 directly."""
    outputs = {em.res.target(r.name) for r in em.res.graph.outputs}
    readers = users(em, name)
    if any(op.op != "view" for op in readers):
        return False
    return (name in outputs and not readers) or (bool(readers) and all(
        _only_stored(em, op.name) for op in readers))
