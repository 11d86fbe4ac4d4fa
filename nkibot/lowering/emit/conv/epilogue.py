"""A convolution's epilogue on its PSUM eviction: an eval BatchNorm folded into a per-channel
(scale, shift), activations, clamps by literals and one residual add (`Epilogue`), parsed
from a conv group and written by the conv and depthwise emitters; any pointwise ops after
those are the epilogue's `tail`, which the row emitter writes on the evicted tile
(convtail.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nkibot.lowering.emit.body import ACTIVATIONS
from nkibot.lowering.emit.builder import PMAX, Block
from nkibot.lowering.emit.fused import PASS_NS
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import BINARY, REDUCE, UNARY, Op, Ref
from nkibot.lowering.schedule.layout import LayoutError, Resolved


def leaf_arg(res: Resolved, arg: object, what: str) -> str:
    """The kernel argument a conv operand (or a BatchNorm statistic) is, whole."""
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"convolution {what} is computed; only inputs and parameters are "
                          "lowered")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced or view.shape != view.leaf.shape:
        raise LayoutError(f"convolution {what} is a view of an input")
    return view.leaf.name


#: Activations the Scalar Engine applies on the PSUM -> SBUF eviction (op -> nl function):
#: every activation function a tail runs there (`body.ACTIVATIONS`), so that the first
#: after the conv costs no pass of its own (level 2 47, a Mish then a Tanh: three Scalar
#: Engine passes a tile, the eviction's copy included, where two do).
EVICT_ACT = dict(ACTIVATIONS)


@dataclass(frozen=True)
class Epilogue:
    """Work a conv's PSUM eviction does: an eval BatchNorm folded into a per-channel scale
    and shift, then `steps` in order, each an activation function (op.op in EVICT_ACT), a
    clamp by a literal (maximum / minimum) or the add of a residual of the output's shape
    (`residual`, a kernel argument or an earlier stage's tensor)."""

    norm: Op | None
    steps: tuple[Op, ...]
    residual: str | None = None
    #: Pointwise ops after the steps, on the evicted tile (convtail.py), and the value they
    #: start from (the last step's, or the conv's own).
    tail: tuple[Op, ...] = ()
    tail_from: str = ""
    #: A sum, max or min over every position dim of the tail's (or chain's) last value, per
    #: batch element and channel (a global pool: each tile's partial, then their fold), and
    #: the pointwise ops on its [N, C, 1...] result (convtail.py writes them too).
    reduce: Op | None = None
    after: tuple[Op, ...] = ()
    #: The reduction folds the channels (dim 1, a [N, 1, positions...] result) instead.
    channels: bool = False
    #: A max or average pool whose windows tile the positions (kernel == stride, no padding
    #: or dilation) in place of a reduction: `after` then runs on its result.
    window: Op | None = None
    #: The tail's affine head, folded into the eviction's (scale, shift) (affinehead.py).
    affine: tuple[Op, ...] = ()

    @property
    def pair(self) -> bool:
        """Whether the eviction reads a (scale, shift) table, not the bias alone."""
        return self.norm is not None or bool(self.affine)

    @property
    def origins(self) -> str:
        ops = ([self.norm] if self.norm is not None else []) + list(self.affine) + list(
            self.steps)
        ops += [*self.tail, *([self.reduce] if self.reduce is not None else []), *self.after]
        return ", ".join(dict.fromkeys(op.origin or op.op for op in ops))

    @property
    def prefix(self) -> bool:
        """Whether the eviction itself does work (a folded norm, steps or a residual) beyond
        the conv's bias: the phase-by-phase (strided transposed) and banded forms take a
        tail only."""
        return self.norm is not None or bool(self.steps) or self.residual is not None


def _pointwise_step(op: Op, refs: list[str]) -> bool:
    """An activation function, or a clamp by a literal (maximum / minimum)."""
    if op.op in EVICT_ACT:
        return len(op.args) == 1
    return op.op in ("maximum", "minimum") and len(refs) == 1 and isinstance(
        op.args[1], int | float) and not isinstance(op.args[1], bool)


#: Ops a tail may hold: pointwise arithmetic and constants (convtail.py places them).
TAIL_OPS = UNARY | BINARY | {"where", "fill", "zeros"}


#: A global pool's fold on the Vector Engine (tensor_reduce), per reduction op.
POOL_FOLD = {"rsum": "nl.add", "rmax": "nl.maximum", "rmin": "nl.minimum"}


def find_epilogue(res: Resolved, conv: Op, outputs: list[Output]) -> Epilogue | None:
    """conv -> [eval BatchNorm of it] -> activations, clamps, one residual add -> a tail of
    any pointwise ops (from the first op those rules do not take) -> [a sum, max or min
    over every position dim -> pointwise ops on its result]; the group's one output its
    last value."""
    rest = [op for op in res.ops if op is not conv]
    if not rest or len(outputs) != 1:
        return None
    last = res.target(outputs[0].name)
    found = _global_pool(res, conv, rest, last) or _window_pool(res, conv, rest, last)
    if found is None:
        return _find(res, conv, rest, last)
    start, end, red = found
    after = tuple(op for op in rest[end + 1:] if op.op != "view")
    if red.op == "pool":
        if not rest[:start]:
            return Epilogue(None, (), None, after=after, window=red)
        epi = _find(res, conv, rest[:start], rest[start - 1].name)
        return None if epi is None else replace(epi, after=after, window=red)
    channels = _reduces(res, red, (1, 2), _before(rest, start, conv))
    if not rest[:start]:
        return Epilogue(None, (), None, reduce=red, after=after, channels=channels)
    epi = _find(res, conv, rest[:start], rest[start - 1].name)
    if epi is None:
        return None
    return replace(epi, reduce=red, after=after, channels=channels)


def _global_pool(res: Resolved, conv: Op, rest: list[Op], last: str
                 ) -> tuple[int, int, Op] | None:
    """(first, last index, final op) of the ops in rest that fold every position dim of
    the value before them (a reduction over dims 2.., or the two-level form
    rewrite.split_long_reductions makes of it: a view to [N, C, k, L], the fold of L, a
    view, the fold of k), or its channels (dim 1), when everything after is pointwise on
    their result alone (then views of it), ending at `last`."""
    k = next((i for i, op in enumerate(rest) if op.op in REDUCE), None)
    if k is None:
        return None
    nd, red = len(conv.shape), rest[k]
    pooled = tuple(conv.shape[:2]) + (1,) * (nd - 2)
    start, end = k, k
    across = (conv.shape[0], 1, *conv.shape[2:])
    source = _before(rest, k, conv)
    whole = _reduces(res, red, (2, nd), source) and tuple(red.shape) in (
        pooled, tuple(conv.shape[:2]))
    channels = _reduces(res, red, (1, 2), source) and tuple(red.shape) in (
        across, (conv.shape[0], *conv.shape[2:]))
    if whole or channels:
        pass
    elif (k >= 1 and k + 2 < len(rest) and rest[k - 1].op == "view" and nd >= 3
          and len(rest[k - 1].shape) == 4 and tuple(rest[k - 1].shape[:2]) == pooled[:2]
          and _reduces(res, red, (3, 4), rest[k - 1].name)
          and rest[k + 1].op == "view" and _reads(res, rest[k + 1], rest[k].name)
          and rest[k + 2].op == red.op and tuple(rest[k + 2].shape) == pooled
          and _reduces(res, rest[k + 2], (2, 3), rest[k + 1].name)):
        chunks = rest[k - 1]
        if not _reads(res, chunks, _before(rest, k - 1, conv)) or (
                chunks.shape[2] * chunks.shape[3] != math.prod(conv.shape[2:])):
            return None
        start, end, red = k - 1, k + 2, rest[k + 2]
    else:
        return None
    if red.op not in POOL_FOLD or nd < 3:
        return None
    return (start, end, red) if _after_ok(res, conv, rest, (end, red), last) else None


def _window_pool(res: Resolved, conv: Op, rest: list[Op], last: str
                 ) -> tuple[int, int, Op] | None:
    """(index, index, op) of rest's first op when it is a max or average pool of the value
    before it whose windows tile the positions (kernel == stride, no padding, no dilation,
    floor mode), and everything after is pointwise on its result, ending at `last`."""
    k = next((i for i, op in enumerate(rest) if op.op in REDUCE or op.op == "pool"), None)
    if k is None or rest[k].op != "pool":
        return None
    pool, nd = rest[k], len(conv.shape)
    kernel, stride = pool.attr("kernel"), pool.attr("stride")
    if not isinstance(kernel, tuple) or len(kernel) != nd - 2 or stride != kernel or (
            pool.attr("kind") not in ("max", "avg") or pool.attr("divisor") is not None):
        return None
    if any(int(str(p)) for p in _tuple(pool.attr("padding"))) or any(
            int(str(d)) != 1 for d in _tuple(pool.attr("dilation", (1,)))):
        return None
    sizes = tuple(conv.shape[:2]) + tuple(s // w for s, w in zip(
        conv.shape[2:], pool_kernel(pool), strict=True))
    if tuple(pool.shape) != sizes or not _reads(res, pool, _before(rest, k, conv)):
        return None
    return (k, k, pool) if _after_ok(res, conv, rest, (k, pool), last) else None


def pool_kernel(pool: Op) -> tuple[int, ...]:
    """A pool op's window size per position dim."""
    return tuple(int(str(k)) for k in _tuple(pool.attr("kernel")))


def _tuple(value: object) -> tuple[object, ...]:
    return value if isinstance(value, tuple) else (value,)


def _after_ok(res: Resolved, conv: Op, rest: list[Op], ended: tuple[int, Op], last: str
              ) -> bool:
    """Everything after rest[end] is pointwise on red's result alone (then views of it),
    ending at `last`."""
    end, red = ended
    mine, seen = {red.name}, {o.name for o in [conv, *rest[:end]]}
    tail = rest[end + 1:]
    for i, op in enumerate(tail):
        if op.op == "view" and all(o.op == "view" for o in tail[i:]):
            if math.prod(op.shape) != math.prod(red.shape) or not any(
                    _reads(res, op, m) for m in mine):
                return False
        elif op.op not in TAIL_OPS or op.shape != red.shape:
            return False
        if any(isinstance(a, Ref) and res.target(a.name) not in mine and res.target(a.name)
               in seen for a in op.args):
            return False
        mine.add(op.name)
    return last == (tail[-1].name if tail else red.name)


def _before(rest: list[Op], k: int, conv: Op) -> str:
    return rest[k - 1].name if k else conv.name


def _reads(res: Resolved, op: Op, name: str) -> bool:
    refs = [res.target(a.name) for a in op.args if isinstance(a, Ref)]
    return refs == [name]


def _reduces(res: Resolved, op: Op, dims: tuple[int, int], source: str) -> bool:
    """`op` is a reduction of exactly `source` over dims range(*dims)."""
    got = op.attr("dims")
    if op.op not in REDUCE or not isinstance(got, tuple) or not _reads(res, op, source):
        return False
    nd = len(res.graph.shape_of(Ref(source)))
    return sorted(int(d) % nd for d in got) == list(range(*dims))


def _find(res: Resolved, conv: Op, rest: list[Op], last: str) -> Epilogue | None:
    """The eviction's prefix and pointwise tail over `rest`, ending at `last`."""
    prev, norm, residual = conv.name, None, None
    steps: list[Op] = []
    chain = [conv.name]
    for i, op in enumerate(rest):
        if not _prefix_step(res, op, prev, conv, (norm is None and not steps, residual is None)):
            return _with_tail(res, last, rest, i, (chain, norm, tuple(steps)))
        if op.op == "blocknorm":
            norm = op
        else:
            steps.append(op)
        prev = op.name
        chain.append(prev)
        residual = _residual(res, tuple(steps), chain)
    if last != prev:
        return None
    return Epilogue(norm, tuple(steps), residual)


def as_tail(res: Resolved, conv: Op, epi: Epilogue) -> Epilogue | None:
    """`epi` with its steps (a residual add too) moved into the tail, for a form whose
    eviction takes only the bias (a transposed conv's, phase by phase); None when it has a
    norm to fold."""
    if epi.norm is not None or not epi.steps:
        return epi if not epi.prefix else None
    ops = (*epi.steps, *epi.tail)
    return replace(epi, norm=None, steps=(), residual=None, tail=ops, tail_from=conv.name) if (
        tail_reads(res, list(ops), [conv.name])) else None


def _prefix_step(res: Resolved, op: Op, prev: str, conv: Op, free: tuple[bool, bool]) -> bool:
    """Whether `op` continues the eviction's own chain from `prev` (`free`: whether a norm
    may still come, whether the residual add is still free)."""
    refs = [res.target(a.name) for a in op.args if isinstance(a, Ref)]
    if prev not in refs:
        return False
    if free[0] and op.op == "blocknorm" and op.attr("kind") == "batch":
        return refs[0] == prev
    if _pointwise_step(op, refs):
        return True
    if op.op == "add" and free[1] and len(refs) == 2:
        other = refs[1] if refs[0] == prev else refs[0]
        view = res.views.get(other)
        return not (view is None or view.transposed or view.sliced or view.shape != op.shape or (
            view.shape != view.leaf.shape or op.shape != conv.shape))
    return False


def _with_tail(res: Resolved, last: str, rest: list[Op], i: int,
               prefix: tuple[list[str], Op | None, tuple[Op, ...]]) -> Epilogue | None:
    """rest[i:] as the tail after the prefix's steps, when it reads no value of the chain
    but the prefix's last; else the longest shorter prefix whose tail does (a leaky ReLU
    written out reads the value before its clamp too), down to the bare conv."""
    chain, norm, steps = prefix
    if last == chain[-1]:
        return None
    for k in range(i, -1, -1):  # k prefix ops kept: chain[:k + 1]
        kept = steps[:k - 1] if norm is not None and k else steps[:k]
        if norm is not None and k == 0:
            kept = ()
        if tail_reads(res, rest[k:], chain[:k + 1]):
            keep_norm = norm if norm is not None and k else None
            return Epilogue(keep_norm, kept, _residual(res, kept, chain[:k + 1]),
                            tuple(rest[k:]), chain[k])
    return None


def _residual(res: Resolved, steps: tuple[Op, ...], chain: list[str]) -> str | None:
    """The residual leaf the prefix's add reads (the operand that is not the chain's)."""
    for op in steps:
        if op.op == "add":
            refs = [res.target(a.name) for a in op.args if isinstance(a, Ref)]
            other = refs[1] if refs[0] in chain else refs[0]
            return res.views[other].leaf.name
    return None


def tail_reads(res: Resolved, tail: list[Op], chain: list[str]) -> bool:
    """Pointwise ops that read, of the conv's chain, only its last value (what an eviction
    took, its result the tail's first input)."""
    for op in tail:
        if op.op not in TAIL_OPS:
            return False
        for a in op.args:
            if isinstance(a, Ref) and res.target(a.name) in chain[:-1]:
                return False
    return True


def emit_folded_norm(res: Resolved, kernel: Kernel, norm: Op, conv_bias: str | None,
                     cout: int, origin: str) -> str:
    """The [Cout, 2] HBM table of (scale, shift) per output channel that folds an eval
    BatchNorm (and the conv's bias) into the eviction: scale = w / sqrt(var + eps), shift =
    (conv bias - mean) * scale + b. Computed once, 128 channels a tile."""
    mean, var, *affine = (leaf_arg(res, a, "BatchNorm statistic") for a in norm.args[1:])
    eps = float(str(norm.attr("eps")))
    cols = [("mean_c", mean), ("var_c", var)] + (
        [("w_c", affine[0]), ("b_c", affine[1])] if affine else []) + (
        [("cb_c", conv_bias)] if conv_bias is not None else [])
    blk = Block(depth=1)
    for var_name, leaf in cols:
        blk.line(f"{var_name} = nl.load({leaf}.reshape(({cout}, 1))[nl.ds(c0, csz), 0:1], "
                 "dtype=nl.float32)")
    blk.line("pair = nl.ndarray((csz, 2), dtype=nl.float32, buffer=nl.sbuf)")
    blk.comment(f"scale = {'w / ' if affine else '1 / '}sqrt(var + eps)")
    blk.line(f"nisa.tensor_scalar(dst=pair[0:csz, 0:1], data=var_c, op0=nl.add, "
             f"operand0={eps!r})")
    blk.line("nisa.activation(dst=pair[0:csz, 0:1], op=nl.rsqrt, data=pair[0:csz, 0:1])")
    if affine:
        blk.line("nisa.tensor_tensor(dst=pair[0:csz, 0:1], data1=pair[0:csz, 0:1], data2=w_c, "
                 "op=nl.multiply)")
    blk.comment("shift = (conv bias - mean) * scale" + (" + b" if affine else ""))
    if conv_bias is not None:
        blk.line("nisa.tensor_tensor(dst=mean_c, data1=cb_c, data2=mean_c, op=nl.subtract)")
    else:
        blk.line("nisa.tensor_scalar(dst=mean_c, data=mean_c, op0=nl.multiply, operand0=-1.0)")
    if affine:
        blk.line("nisa.scalar_tensor_tensor(dst=pair[0:csz, 1:2], data=mean_c, op0=nl.multiply, "
                 "operand0=pair[0:csz, 0:1], op1=nl.add, operand1=b_c)")
    else:
        blk.line("nisa.tensor_tensor(dst=pair[0:csz, 1:2], data1=mean_c, data2=pair[0:csz, 0:1], "
                 "op=nl.multiply)")
    return emit_pair_table(kernel, "fold_norm", [leaf for _, leaf in cols], blk,
                           (f"{norm.origin} (running statistics)", origin), cout)


def emit_pair_table(kernel: Kernel, name: str, args: list[str], blk: Block,
                    what: tuple[str, str], cout: int) -> str:
    """A [Cout, 2] HBM table of (scale, shift) per output channel, filled once, 128
    channels a call, by a helper of `args`: `blk` builds the tile `pair` of channels
    c0..c0+csz. `what`: (what is folded, the conv's origin)."""
    body, names = kernel.body, kernel.names
    table, fn = names.fresh("evict_hbm"), names.fresh(name)
    blk.line("nisa.dma_copy(dst=table[nl.ds(c0, csz), 0:2], src=pair)")
    kernel.helpers.append([f"def {fn}({', '.join([*args, 'table'])}, c0, csz):",
                           f'    """{what[0]} folded into {what[1]}: (scale, shift) of '
                           'channels c0..c0+csz."""', *blk.lines])
    body.comment(f"{what[0]} folded into {what[1]}'s PSUM eviction: a (scale, shift) pair "
                 "per output channel, computed once")
    body.line(f"{table} = nl.ndarray(({cout}, 2), dtype=nl.float32, buffer=nl.hbm)")
    for c0 in range(0, cout, PMAX):
        body.line(f"{fn}({', '.join([*args, table])}, {c0}, {min(PMAX, cout - c0)})")
    return table


def eviction_busy(epi: Epilogue) -> dict[str, float]:
    """Modelled ns per element of a plain conv tile's eviction (`conv._emit_eviction`,
    then `emit_steps`), per engine: the tail after it balances against it."""
    steps = list(epi.steps)
    busy = {"scalar": PASS_NS["scalar"], "vector": 0.0}  # the eviction's activation
    if steps and steps[0].op == "add":
        busy["vector"] += 2 * PASS_NS["vector"]  # a residual read beside the sums
        steps.pop(0)
    if steps and steps[0].op in EVICT_ACT:
        steps.pop(0)  # in the eviction's activation
    for group in _step_groups(steps):
        if group[0].op in EVICT_ACT:
            busy["scalar"] += PASS_NS["scalar"]
        else:  # a residual reads two tiles; a clamp (one or both bounds) one
            busy["vector"] += PASS_NS["vector"] * (2 if group[0].op == "add" else 1)
    return busy


def _step_groups(steps: list[Op]) -> list[list[Op]]:
    """The steps after the eviction, one instruction each: an activation, a residual add,
    or a clamp by one bound or by both (a maximum and a minimum in a row)."""
    groups: list[list[Op]] = []
    for op in steps:
        last = groups[-1] if groups else []
        if (len(last) == 1 and last[0].op in ("maximum", "minimum")
                and op.op in ("maximum", "minimum") and op.op != last[0].op):
            last.append(op)
        else:
            groups.append([op])
    return groups


def emit_steps(blk: Block, steps: list[Op], residual: str = "") -> None:
    """The epilogue's steps after the eviction, on the SBUF tile `res` (`residual`: the
    residual's tile, indexed). Each step writes a tile of its own, which `res` then names:
    written in place, the evicted tile would stay live until the store, and the next
    tile's eviction into the same buffer would wait for that store (level 2 47, a Mish on
    the eviction then a Tanh: 2,761 us in place against 2,584, model estimate trn1)."""
    for group in _step_groups(steps):
        op = group[0]
        blk.line("st = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.sbuf)")
        if op.op in EVICT_ACT:
            blk.line(f"nisa.activation(dst=st, op={EVICT_ACT[op.op]}, data=res)")
        elif op.op == "add":
            blk.line(f"r_t = nl.load({residual}, dtype=nl.float32)")
            blk.comment(f"{op.origin}: the residual, on the Vector Engine")
            blk.line("nisa.tensor_tensor(dst=st, data1=res, data2=r_t, op=nl.add)")
        else:
            clamp = ", ".join(f"op{n}=nl.{b.op}, operand{n}={float(str(b.args[1]))!r}"
                              for n, b in enumerate(group))
            blk.comment(f"{op.origin}: a clamp on the Vector Engine")
            blk.line(f"nisa.tensor_scalar(dst=st, data=res, {clamp})")
        blk.line("res = st")
