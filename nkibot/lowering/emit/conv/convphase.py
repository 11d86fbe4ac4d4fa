"""Strided transposed convolution by output phase (sub-pixel): no zero is multiplied.

Output o = i * stride + k * dilation - padding. Per dim, the outputs of phase r
(o = m * stride + r) read only the taps k with (r + padding - k * dilation) divisible by
the stride, each at input m + c_k with c_k = (r + padding - k * dilation) / stride: a
plain stride-1 correlation over the ORIGINAL input plane. Those taps are k = k_r + j * t
(t = stride / gcd(stride, dilation)), at c_k = c_r - j * dilation / gcd: affine in j.

Per output tile (whole phases: its start is a multiple of the stride in every dim), each
phase accumulates its taps in PSUM and is copied (bias added) into the tile's SBUF output
through a strided free-dim view; the tile is then stored contiguously.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.conv import conv
from nkibot.lowering.emit.conv.conv import ConvSpec, Dim
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.schedule import convfold
from nkibot.sim.cost.quick import SBUF_BYTES

if TYPE_CHECKING:  # convphaseband builds on this module
    from nkibot.lowering.emit.conv.convphaseband import PhaseBand

# bytes per partition (of 192 KiB) for the resident plane, the weights and the output tile
# (no band form here: the plane stays whole; KernelBench 73's 128 KiB plane fits)
PHASE_BUDGET = SBUF_BYTES * 7 // 8  # 168 KiB on trn1


@dataclass(frozen=True)
class Phase:
    """One dim's phase r: its first tap k_r, tap step t, tap count, plane offset of tap
    k_r (lead included) and its step per tap."""

    r: int
    first: int
    step: int
    count: int
    offset: int
    shift: int


@dataclass(frozen=True)
class PhaseDim:
    stride: int
    phases: tuple[Phase, ...]
    lead: int  # zero columns before the input in the plane
    plane: int


def phase_dim(d: Dim) -> PhaseDim | None:
    """The phases of a transposed dim (a phase with no tap has count 0; None when no
    phase has one)."""
    s, g = d.up, math.gcd(d.up, d.dil)
    pad = d.dil * (d.taps - 1) - d.lead
    raw = [(r, [k for k in range(d.taps) if (r + pad - k * d.dil) % s == 0])
           for r in range(min(s, d.size_out))]
    ends = [(min(cs), max(cs) + -(-(d.size_out - r) // s) - 1) for r, ks in raw if ks
            for cs in [[(r + pad - k * d.dil) // s for k in ks]]]
    if not ends:
        return None
    lead = max(0, -min(lo for lo, _ in ends))
    tail = max(0, max(hi for _, hi in ends) - (d.size_in - 1))
    phases = tuple(Phase(r, ks[0], s // g, len(ks), (r + pad - ks[0] * d.dil) // s + lead,
                         d.dil // g) if ks else Phase(r, 0, 1, 0, 0, 0) for r, ks in raw)
    return PhaseDim(s, phases, lead, d.size_in + lead + tail)


def phase_dims(spec: ConvSpec) -> tuple[PhaseDim, ...] | None:
    """Every dim's phases when the phase form applies (transposed, some stride > 1, some
    phase has taps, the plane, weights and output tile fit PHASE_BUDGET), else None."""
    if not spec.transposed or all(d.up == 1 for d in spec.dims):
        return None
    dims = [phase_dim(d) for d in spec.dims]
    if any(p is None for p in dims):
        return None
    out = tuple(p for p in dims if p is not None)
    tile = math.prod(_tiles(spec, out))
    room = (PHASE_BUDGET - 4 * tile) // 4 - spec.cout_g * spec.taps
    return out if math.prod(p.plane for p in out) <= room else None


def faster(spec: ConvSpec, dims: tuple[PhaseDim, ...]) -> bool:
    """Modelled Tensor Engine time (each matmul max(N, 64) cycles) of the phase form below
    the zero-inserted form's (same output tiles of up to 512 positions per phase)."""
    positions = math.prod(d.size_out for d in spec.dims)
    zero = spec.taps * max(positions, 64 * math.ceil(positions / conv.NMAX))
    per = math.ceil(positions / math.prod(p.stride for p in dims))
    calls = math.ceil(per / conv.NMAX)
    phase = sum(math.prod(ph.count for ph in combo) * max(per, 64 * calls)
                for combo in itertools.product(*(p.phases for p in dims)))
    return phase < zero


@dataclass(frozen=True)
class PhaseFold:
    """f taps of dim `dim` stacked on the partitions, per phase in reverse tap order: block
    u holds the plane shifted left by u * shift; weight position J - 1 - b of phase r
    holds its tap b * f + u counted from the last (J = ceil(count / f))."""

    dim: int
    f: int


def choose_fold(spec: ConvSpec, dims: tuple[PhaseDim, ...], elem_bytes: int
                ) -> PhaseFold | PhaseBand:
    """The (dim, f) of least modelled PE time (matmuls x max(N, 64) cycles, fp32 4x, at
    2.8 GHz) plus plane loads (f copies at 272 B/ns, counted twice), cin * f <= 128; a
    fold whose plane copies and output would take the DMA queues longer than its matmuls
    take the PE is not taken. A band of output rows per phase (convphaseband.py) when it
    is faster still."""
    return fold_cost(spec, dims, elem_bytes)[1]


def fold_cost(spec: ConvSpec, dims: tuple[PhaseDim, ...], elem_bytes: int
              ) -> tuple[float, PhaseFold | PhaseBand]:
    """choose_fold's modelled ns per batch element and group, and its fold. The matmuls'
    cycles are counted over all of a phase's output tiles (before 2026-12-04 over one
    tile only, against a whole plane's loads: folds stayed too small, e.g. KernelBench 72
    stacked 2 of its 4 taps where it could 3)."""
    per = math.prod(d.size_out for d in spec.dims) // math.prod(p.stride for p in dims)
    cycles = convfold.pe_ns(max(per, 64 * -(-per // conv.NMAX)), elem_bytes)
    plane = convfold.load_ns(spec.cin_g * math.prod(p.plane for p in dims) * elem_bytes * 2)
    out = convfold.load_ns(spec.cout_g * math.prod(d.size_out for d in spec.dims) * elem_bytes)
    best, pe = (math.inf, PhaseFold(0, 1)), math.inf
    for i, p in enumerate(dims):
        for f in range(1, min(max(ph.count for ph in p.phases), PMAX // spec.cin_g) + 1):
            calls = sum(math.prod(-(-ph.count // f) if j == i else ph.count
                                  for j, ph in enumerate(combo))
                        for combo in itertools.product(*(q.phases for q in dims)))
            if f > 1 and f * plane + out > calls * cycles:
                continue  # DMA bound: more copies slow it (KernelBench 79: 0.54 -> 0.37)
            if calls * cycles + f * plane < best[0]:
                best, pe = (calls * cycles + f * plane, PhaseFold(i, f)), calls * cycles
    from nkibot.lowering.emit.conv import convphaseband  # it builds on this module

    band = convphaseband.choose(spec, dims, elem_bytes, (best[0], pe))
    return band if band is not None else best


def _emit_weights(body: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...], fold: PhaseFold,
                  compute: str) -> None:
    """w_p{r}: the weights of phase r of the folded dim (PhaseFold's layout); the other
    dims keep every tap at its own index."""
    cin, i = spec.cin_g, fold.dim
    ks = [str(d.taps) for d in spec.dims]
    names = []
    for ph in dims[i].phases:
        if not ph.count:
            names.append("None")
            continue
        j = -(-ph.count // fold.f)
        shape = ", ".join([*ks[:i], str(j), *ks[i + 1:]])
        names.append(f"w_p{ph.r}")
        body.line(f"w_p{ph.r} = nl.ndarray(({cin * fold.f}, {spec.cout_g}, {shape}), "
                  f"dtype={compute}, buffer=nl.sbuf)")
        convfold.zero_weights(body, spec, f"w_p{ph.r}")
        for u in range(min(fold.f, ph.count)):
            n = -(-(ph.count - u) // fold.f)
            lo, step = ph.first + (ph.count - 1 - u - (n - 1) * fold.f) * ph.step, fold.f * ph.step
            src = [f"0:{k}" for k in ks]
            src[i] = f"{lo}:{lo + step * (n - 1) + 1}" + (f":{step}" if n > 1 else "")
            dst = [f"0:{k}" for k in ks]
            dst[i] = f"{j - n}:{j}"
            convfold.weight_copy(body, spec, f"w_p{ph.r}", (u * cin, 0), (dst, src))
    body.line(f"w_sb = ({', '.join(names)},)")


def _tiles(spec: ConvSpec, dims: tuple[PhaseDim, ...]) -> tuple[int, ...]:
    """Output tile per dim: whole phases (a multiple of the stride), up to 512 positions
    per phase, innermost first."""
    sizes: list[int] = []
    room = conv.NMAX
    for d, p in zip(reversed(spec.dims), reversed(dims), strict=True):
        per = -(-d.size_out // p.stride)
        t = max(1, min(per, room))
        sizes.insert(0, min(t * p.stride, d.size_out))
        room = room // t if t == per else 1
    return tuple(sizes)


def emit_phased(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                names: tuple[str, str, str | None], out: Output, compute: str) -> None:
    """Weights resident per group; per batch element the original plane (zero margins
    only) and the output tiles, each computed phase by phase."""
    x, w, bias = names
    body = kernel.body
    fold = choose_fold(spec, dims, 4 if compute == "nl.float32" else 2)
    if not isinstance(fold, PhaseFold):
        from nkibot.lowering.emit.conv import convphaseband

        convphaseband.emit(kernel, spec, dims, fold, names, out, compute)
        return
    fn = _emit_tile(kernel, spec, dims, bias is not None, out.dtype, fold)
    conv.emit_views(body, spec, x, w, bias, out)
    body.line(f"for g in nl.affine_range({spec.groups}):")
    body.indent()
    body.comment("weights stay resident for every batch element and output tile of group g, "
                 f"one tile per phase of dim {fold.dim}" + (
                     f" ({fold.f} taps a matmul, stacked on the partitions)" if fold.f > 1
                     else ""))
    _emit_weights(body, spec, dims, fold, compute)
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    body.comment("by output phase: the ORIGINAL input plane, padded only where a phase's "
                 "taps read past it (no zero insertion)")
    sizes = tuple(fold.f if i == fold.dim else 1 for i in range(len(dims)))
    plane = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups, tuple(
        Dim(d.size_in, p.plane, 1, 1, max(ph.shift for ph in p.phases), 1, p.lead)
        for d, p in zip(spec.dims, dims, strict=True)), False, spec.stack)
    conv.emit_plane(body, plane, convfold.Fold(sizes, sizes), compute)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    params = "x_sb, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
        sp, spec.dims, _tiles(spec, dims), strict=True)]
    emit_grid(body, axes, f"{fn}({params}, {fields})", "affine_range")
    body.dedent()
    body.dedent()


def _emit_tile(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...], bias: bool,
               out_dtype: str, fold: PhaseFold) -> str:
    fn = kernel.names.fresh("conv_phase_tile")
    blk = Block(depth=1)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    sizes = ", ".join(f"{v}sz" for v in sp)
    blk.line(f"res = nl.ndarray((csz, {sizes}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if bias:
        blk.line("b_t = nl.load(b_v[g, nl.ds(c0, csz), 0:1], dtype=nl.float32)")
    for combo in itertools.product(*(p.phases for p in dims)):
        _emit_phase(blk, spec, dims, combo, bias, fold)
    index = ", ".join(f"nl.ds({v}0, {v}sz)" for v in sp)
    blk.comment("the whole tile, stored contiguously")
    blk.line(f"nl.store(out_v[n, g, nl.ds(c0, csz), {index}], res)")
    args = ", ".join(f"{v}0, {v}sz" for v in sp)
    head = "x_sb, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g"
    kernel.helpers.append([
        f"def {fn}({head}, c0, csz, {args}):",
        '    """Output channels c0..c0+csz (of group g) at one tile of output positions, '
        'phase by phase (tile starts are multiples of the stride)."""',
        *blk.lines,
    ])
    return fn


def _emit_phase(blk: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                combo: tuple[Phase, ...], bias: bool, fold: PhaseFold) -> None:
    """One output phase of the tile: its taps' matmuls over stride-1 windows of the
    original plane, then a strided copy into the tile (bias added)."""
    sp = [f"s{i}" for i in range(len(spec.dims))]
    rs = ", ".join(str(ph.r) for ph in combo)
    blk.comment(f"phase ({rs}): outputs at tile offset ({rs}) mod stride; "
                + " x ".join(str(ph.count) for ph in combo) + " taps")
    counts = [f"({v}sz - {ph.r} + {p.stride - 1}) // {p.stride}" if p.stride > 1 else f"{v}sz"
              for v, ph, p in zip(sp, combo, dims, strict=True)]
    blk.line(f"{', '.join(f'q{i}' for i in range(len(sp)))}, = {', '.join(counts)},")
    blk.line(f"if {' and '.join(f'q{i} > 0' for i in range(len(sp)))}:")
    blk.indent()
    view = ", ".join(f"{ph.r}:{ph.r} + (q{i} - 1) * {p.stride} + 1:{p.stride}"
                     if p.stride > 1 else f"0:q{i}"
                     for i, (ph, p) in enumerate(zip(combo, dims, strict=True)))
    if any(ph.count == 0 for ph in combo):
        emit_empty_phase(blk, view, bias)
        return
    q = ", ".join(f"q{i}" for i in range(len(sp)))
    blk.line(f"acc = nl.ndarray((csz, {q}), dtype=nl.float32, buffer=nl.psum)")
    taps, windows = [], []
    for i, (v, ph, p) in enumerate(zip(sp, combo, dims, strict=True)):
        if i == fold.dim:
            start = f"{v}0 // {p.stride}" if p.stride > 1 else f"{v}0"
            taps.append("{pos}")
            last = ph.offset - (ph.count - 1) * ph.shift
            windows.append(f"nl.ds({start} + {last}{{shift}}, q{i})")
            continue
        tap, window = emit_tap_loop(blk, i, v, ph, p)
        taps.append(tap)
        windows.append(window)
    line = (f"nisa.nc_matmul(acc, w_sb[{combo[fold.dim].r}][0:{{rows}}, nl.ds(c0, csz), "
            f"{', '.join(taps)}], x_sb[0:{{rows}}, {', '.join(windows)}])")
    _emit_base_taps(blk, spec.cin_g, combo[fold.dim], fold, line)
    for i, ph in enumerate(combo):
        if ph.count > 1 and i != fold.dim:
            blk.dedent()
    emit_evict(blk, view, bias)


def emit_tap_loop(blk: Block, i: int, v: str, ph: Phase, p: PhaseDim) -> tuple[str, str]:
    """(tap index, plane window) of phase `ph` along unfolded dim i (tile variable v): a
    loop `j{i}` over its taps is opened when it has several (the caller closes it)."""
    start = f"{v}0 // {p.stride}" if p.stride > 1 else f"{v}0"
    if ph.count > 1:
        blk.line(f"for j{i} in nl.affine_range({ph.count}):")
        blk.indent()
    j = f"j{i}" if ph.count > 1 else "0"
    tap = f"{ph.first} + {j} * {ph.step}" if ph.count > 1 else str(ph.first)
    off = f"{ph.offset} - {j} * {ph.shift}" if ph.count > 1 else str(ph.offset)
    return tap, f"nl.ds({start} + {off}, q{i})"


def emit_empty_phase(blk: Block, view: str, bias: bool) -> None:
    """A phase no tap reaches: its view of the tile is zero (plus the bias); closes the
    phase's `if`."""
    blk.comment("no tap reaches this phase: zero" + (" plus the bias" if bias else ""))
    blk.line(f"nisa.memset(dst=res[0:csz, {view}], value=0.0)")
    if bias:
        blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=res[0:csz, {view}], "
                 "op0=nl.add, operand0=b_t)")
    blk.dedent()


def emit_evict(blk: Block, view: str, bias: bool) -> None:
    """The phase's PSUM sums `acc` into its strided view of the tile (plus the bias);
    closes the phase's `if`."""
    if bias:
        blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=acc, op0=nl.add, "
                 "operand0=b_t)")
    else:
        blk.line(f"nisa.tensor_copy(dst=res[0:csz, {view}], src=acc)")
    blk.dedent()


def _emit_base_taps(blk: Block, cin: int, ph: Phase, fold: PhaseFold, line: str) -> None:
    """The folded dim's base taps b (reverse order, f a matmul): full ones in a loop, a
    ragged last one on the prefix of blocks whose taps exist."""
    j, f = -(-ph.count // fold.f), fold.f
    full = j - 1 if ph.count % f else j
    step = f * ph.shift
    if full > 1:
        blk.line(f"for b in nl.affine_range({full}):")
        blk.line("    " + line.format(rows=cin * f, pos=f"{j - 1} - b",
                                      shift=f" + b * {step}" if step else ""))
    elif full == 1:
        blk.line(line.format(rows=cin * f, pos=str(j - 1), shift=""))
    if ph.count % f:
        blk.line(line.format(rows=cin * (ph.count - (j - 1) * f), pos="0",
                             shift=f" + {(j - 1) * step}" if j > 1 and step else ""))
