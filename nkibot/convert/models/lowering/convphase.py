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

from nkibot.convert.models.lowering import conv, convfold
from nkibot.convert.models.lowering.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.convert.models.lowering.conv import ConvSpec, Dim
from nkibot.convert.models.lowering.rowwise import Kernel, Output


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
    phase has taps, the original plane fits the SBUF budget), else None."""
    if not spec.transposed or all(d.up == 1 for d in spec.dims):
        return None
    dims = [phase_dim(d) for d in spec.dims]
    if any(p is None for p in dims):
        return None
    out = tuple(p for p in dims if p is not None)
    room = conv.PLANE_BUDGET // 4 - spec.cout_g * spec.taps
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
    fn = _emit_tile(kernel, spec, dims, bias is not None, out.dtype)
    conv.emit_views(body, spec, x, w, bias, out)
    body.line(f"for g in nl.affine_range({spec.groups}):")
    body.indent()
    body.comment("weights stay resident for every batch element and output tile of group g")
    ones = convfold.Fold((1,) * len(spec.dims), tuple(d.taps for d in spec.dims))
    convfold.emit_weights(body, spec, ones, compute)
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    body.comment("by output phase: the ORIGINAL input plane, padded only where a phase's "
                 "taps read past it (no zero insertion)")
    plane = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups, tuple(
        Dim(d.size_in, p.plane, 1, 1, 1, 1, p.lead) for d, p in zip(spec.dims, dims,
                                                                  strict=True)), False)
    conv.emit_plane(body, plane, ones, compute)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    params = "x_sb, w_sb, " + ("b_v, " if bias else "") + "out_v, n, g"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
        sp, spec.dims, _tiles(spec, dims), strict=True)]
    emit_grid(body, axes, f"{fn}({params}, {fields})", "affine_range")
    body.dedent()
    body.dedent()


def _emit_tile(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...], bias: bool,
               out_dtype: str) -> str:
    fn = kernel.names.fresh("conv_phase_tile")
    blk = Block(depth=1)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    sizes = ", ".join(f"{v}sz" for v in sp)
    blk.line(f"res = nl.ndarray((csz, {sizes}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if bias:
        blk.line("b_t = nl.load(b_v[g, nl.ds(c0, csz), 0:1], dtype=nl.float32)")
    for combo in itertools.product(*(p.phases for p in dims)):
        _emit_phase(blk, spec, dims, combo, bias)
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
                combo: tuple[Phase, ...], bias: bool) -> None:
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
        blk.comment("no tap reaches this phase: zero" + (" plus the bias" if bias else ""))
        blk.line(f"nisa.memset(dst=res[0:csz, {view}], value=0.0)")
        if bias:
            blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=res[0:csz, {view}], "
                     "op0=nl.add, operand0=b_t)")
        blk.dedent()
        return
    q = ", ".join(f"q{i}" for i in range(len(sp)))
    blk.line(f"acc = nl.ndarray((csz, {q}), dtype=nl.float32, buffer=nl.psum)")
    taps, windows = [], []
    for i, (v, ph, p) in enumerate(zip(sp, combo, dims, strict=True)):
        if ph.count > 1:
            blk.line(f"for j{i} in nl.affine_range({ph.count}):")
            blk.indent()
        j = f"j{i}" if ph.count > 1 else "0"
        start = f"{v}0 // {p.stride}" if p.stride > 1 else f"{v}0"
        taps.append(f"{ph.first} + {j} * {ph.step}" if ph.count > 1 else str(ph.first))
        off = f"{ph.offset} - {j} * {ph.shift}" if ph.count > 1 else str(ph.offset)
        windows.append(f"nl.ds({start} + {off}, q{i})")
    blk.line(f"nisa.nc_matmul(acc, w_sb[0:{spec.cin_g}, nl.ds(c0, csz), {', '.join(taps)}], "
             f"x_sb[0:{spec.cin_g}, {', '.join(windows)}])")
    for ph in combo:
        if ph.count > 1:
            blk.dedent()
    if bias:
        blk.line(f"nisa.tensor_scalar(dst=res[0:csz, {view}], data=acc, op0=nl.add, "
                 "operand0=b_t)")
    else:
        blk.line(f"nisa.tensor_copy(dst=res[0:csz, {view}], src=acc)")
    blk.dedent()
