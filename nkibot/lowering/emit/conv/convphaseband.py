"""Strided transposed convolution by output phase, with a band of output rows per phase.

convphase.py runs each output phase as a stride-1 correlation over the original plane:
phase r of a dim computes out[m * stride + r] = sum over t < count of W_t * P[m + last + t]
(W_t its tap first + (count - 1 - t) * step, `last` the plane offset of its last tap). With
few output channels (KernelBench 72: 8 a group) its matmuls fill 8 of the PE's columns. As
in convband.py, R phase rows of one dim go on the columns (column rr * cout + co: phase row
R * G + rr) and A plane blocks on the partitions (block a shifted by a), so at base shift
p * A the weight of (block a, row rr) is W_t with t = p * A + a - rr, zero outside the
phase's taps; ceil((count + R - 1) / A) base shifts per phase. The moving window steps R
plane rows. The tile's SBUF result holds, per column, [groups, phases of the banded dim,
other dims]; band row rr of phase rd is stored as output rows (R * G + rr) * stride + rd.
"""

from __future__ import annotations

import itertools

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.conv import convload, convtail
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.schedule import convfold, phasefold
from nkibot.lowering.schedule.convspec import ConvSpec, Dim
from nkibot.lowering.schedule.phasefold import (
    Phase,
    PhaseBand,
    PhaseDim,
    _last,
    _phase_rows,
    groups,
    plane_len,
)


def emit(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
         names: tuple[str, str, str | None], out: Output, compute: str,
         tail: convtail.TailCall | None = None) -> None:
    """Weights resident per group; per batch element the original plane, A shifted
    blocks, and the output tiles, each computed phase by phase (then a tail that reads no
    tensor, if any: the tile's partitions are band rows x channels)."""
    x, w, bias = names
    body = kernel.body
    assert tail is None or not tail.views
    fn = _emit_tile(kernel, spec, dims, band, (bias is not None, out.dtype), tail)
    convload.emit_views(body, spec, x, w, bias, out)
    body.line(f"for g in nl.affine_range({spec.groups}):")
    body.indent()
    body.comment(f"weights stay resident for every batch element and output tile of group g, "
                 f"one tile per phase of dim {band.dim}: {band.blocks} plane blocks on the "
                 f"partitions, {band.rows} phase rows of dim {band.dim} on the columns (a "
                 "banded weight matrix: few output channels fill few columns)")
    _emit_weights(body, spec, dims, band, compute)
    if bias is not None:
        convload.emit_resident_bias(body, spec, 1, band.rows)
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    body.comment("by output phase: the ORIGINAL input plane, padded only where a phase's "
                 "taps read past it (no zero insertion)")
    i = band.dim
    sizes = tuple(band.blocks if j == i else 1 for j in range(len(dims)))
    planes = [plane_len(spec, dims, band) if j == i else p.plane for j, p in enumerate(dims)]
    plane = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups, tuple(
        Dim(d.size_in, n, 1, 1, max(ph.shift for ph in p.phases), 1, p.lead)
        for d, p, n in zip(spec.dims, dims, planes, strict=True)), False, spec.stack)
    convload.emit_plane(body, plane, convfold.Fold(sizes, sizes, i), compute)
    _emit_grid(body, spec, dims, band, bias is not None, fn)
    body.dedent()
    body.dedent()


def _emit_weights(body: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
                  compute: str) -> None:
    """w_p{r}[(block a, cin), (row rr, cout), taps, J - 1 - p, taps]: W_t, t = p * A + a -
    rr, of phase r of the banded dim (zero where no tap is); other dims at their index."""
    cin, cout, i = spec.cin_g, spec.cout_g, band.dim
    ks = [str(d.taps) for d in spec.dims]
    names = []
    for ph in dims[i].phases:
        if not ph.count:
            names.append("None")
            continue
        j = band.shifts(ph)
        name = f"w_p{ph.r}"
        names.append(name)
        shape = ", ".join([*ks[:i], str(j), *ks[i + 1:]])
        body.line(f"{name} = nl.ndarray(({cin * band.blocks}, {cout * band.rows}, {shape}), "
                  f"dtype={compute}, buffer=nl.sbuf)")
        body.line(f"nisa.memset(dst={name}, value=0.0, engine=nisa.engine.gpsimd)")
        for a, rr in itertools.product(range(band.blocks), range(band.rows)):
            # position q holds t = (J - 1 - q) * A + a - rr: kernel tap first + (count - 1
            # - t) * step, rising by A * step with q
            qs = [q for q in range(j) if 0 <= (j - 1 - q) * band.blocks + a - rr < ph.count]
            if not qs:
                continue
            t0 = (j - 1 - qs[0]) * band.blocks + a - rr
            lo, step = ph.first + (ph.count - 1 - t0) * ph.step, band.blocks * ph.step
            src = [f"0:{k}" for k in ks]
            src[i] = f"{lo}:{lo + step * (len(qs) - 1) + 1}" + (
                f":{step}" if len(qs) > 1 else "")
            dst = [f"0:{k}" for k in ks]
            dst[i] = f"{qs[0]}:{qs[-1] + 1}"
            convload.weight_copy(body, spec, name, (a * cin, rr * cout), (dst, src))
    body.line(f"w_sb = ({', '.join(names)},)")


def _last_rows(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand) -> tuple[int, ...]:
    """Per phase of the banded dim, its rows in the last group (R when full)."""
    d, p, n = spec.dims[band.dim], dims[band.dim], groups(spec, dims, band)
    return tuple(_phase_rows(d, p, ph.r) - band.rows * (n - 1) for ph in p.phases)


def _emit_grid(body: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
               bias: bool, fn: str) -> None:
    """The tiles over whole groups, then a last group with fewer rows (if any) apart."""
    sp = [f"s{j}" for j in range(len(spec.dims))]
    params = "x_sb, w_sb, " + ("b_sb, " if bias else "") + "out_v, n, g"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    i, n = band.dim, groups(spec, dims, band)
    last = _last_rows(spec, dims, band)
    whole = n if all(r == band.rows for r in last) else n - 1
    tiles = phasefold.band_tiles(spec, dims, band)
    cols = Axis("c", spec.cout_g * band.rows, PMAX)
    axes = [cols] + [Axis(v, whole if j == i else d.size_out, t)
                     for j, (v, d, t) in enumerate(zip(sp, spec.dims, tiles, strict=True))]
    full = (band.rows,) * len(last)
    emit_grid(body, axes, f"{fn}({params}, {fields}, {full!r})", "affine_range")
    if whole < n:
        body.comment(f"the last group: {last!r} of its {band.rows} rows per phase are outputs")
        axes = [cols] + [Axis(v, d.size_out, t) for j, (v, d, t) in
                         enumerate(zip(sp, spec.dims, tiles, strict=True)) if j != i]
        emit_grid(body, axes, f"{fn}({params}, {fields}, {last!r})", "affine_range",
                  {sp[i]: (str(whole), 1)})


def _res_view(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
              combo: tuple[Phase, ...]) -> str:
    """The tile result's view a phase writes: its groups at its banded-dim phase, strided
    positions in the other dims."""
    parts = []
    for j, (ph, p) in enumerate(zip(combo, dims, strict=True)):
        if j == band.dim:
            parts.append(f"0:s{j}sz, {ph.r}")
        elif p.stride > 1:
            parts.append(f"{ph.r}:{ph.r} + (q{j} - 1) * {p.stride} + 1:{p.stride}")
        else:
            parts.append(f"0:q{j}")
    return ", ".join(parts)


def _emit_phase(blk: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
                combo: tuple[Phase, ...], evict: tuple[bool, str]) -> None:
    bias, engine = evict
    sp = [f"s{j}" for j in range(len(spec.dims))]
    i, rows = band.dim, spec.cin_g * band.blocks
    rs = ", ".join(str(ph.r) for ph in combo)
    blk.comment(f"phase ({rs}): " + " x ".join(str(ph.count) for ph in combo) + " taps")
    counts = [f"{v}sz" if j == i else (f"({v}sz - {ph.r} + {p.stride - 1}) // {p.stride}"
                                       if p.stride > 1 else f"{v}sz")
              for j, (v, ph, p) in enumerate(zip(sp, combo, dims, strict=True))]
    blk.line(f"{', '.join(f'q{j}' for j in range(len(sp)))}, = {', '.join(counts)},")
    blk.line(f"if {' and '.join(f'q{j} > 0' for j in range(len(sp)))}:")
    blk.indent()
    view = _res_view(spec, dims, band, combo)
    if any(ph.count == 0 for ph in combo):
        convload.emit_empty_phase(blk, view, bias)
        return
    blk.line(f"acc = nl.ndarray((csz, {', '.join(f'q{j}' for j in range(len(sp)))}), "
             "dtype=nl.float32, buffer=nl.psum)")
    taps, windows, loops = [], [], 0
    for j, (v, ph, p) in enumerate(zip(sp, combo, dims, strict=True)):
        if j == i:
            one = band.shifts(ph) == 1
            taps.append("0" if one else f"{band.shifts(ph) - 1} - b")
            start = f"{v}0 * {band.rows} + {_last(ph)}" + ("" if one else
                                                          f" + b * {band.blocks}")
            windows.append(f"{start}:{start} + (q{j} - 1) * {band.rows} + 1:{band.rows}")
            continue
        tap, window = convload.emit_tap_loop(blk, j, v, ph, p)
        taps.append(tap)
        windows.append(window)
        loops += ph.count > 1
    matmul = (f"nisa.nc_matmul(acc, w_sb[{combo[i].r}][0:{rows}, 0:csz, {', '.join(taps)}], "
              f"x_sb[0:{rows}, {', '.join(windows)}])")
    if band.shifts(combo[i]) > 1:
        blk.comment(f"base shift b: block a meets band row rr at tap b * {band.blocks} + a - rr")
        blk.line(f"for b in nl.affine_range({band.shifts(combo[i])}):")
        blk.line(f"    {matmul}")
    else:
        blk.line(matmul)
    for _ in range(loops):
        blk.dedent()
    convload.emit_evict(blk, view, bias, engine)


def _emit_tile(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand,
               out: tuple[bool, str], tail: convtail.TailCall | None) -> str:
    bias, out_dtype = out
    fn = kernel.names.fresh("conv_phase_band_tile")
    blk = Block(depth=1)
    sp = [f"s{j}" for j in range(len(spec.dims))]
    i, cout, rows, stride = band.dim, spec.cout_g, band.rows, dims[band.dim].stride
    shape = ", ".join(f"{v}sz, {stride}" if j == i else f"{v}sz" for j, v in enumerate(sp))
    blk.line(f"res = nl.ndarray((csz, {shape}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if bias:
        blk.line(f"b_t = b_sb[0:{cout * rows}, 0, 0:1]  # bias, a column per band row x channel")
    combos = list(itertools.product(*(p.phases for p in dims)))
    engines = phasefold.evict_engines(dict(tail.busy) if tail is not None else None,
                                      len(combos))
    for combo, engine in zip(combos, engines, strict=True):
        _emit_phase(blk, spec, dims, band, combo, (bias, engine))
    if tail is not None:
        sizes = [s for j, v in enumerate(sp) for s in ([f"{v}sz", str(stride)] if j == i
                                                         else [f"{v}sz"])]
        for line in tail.call(sizes, "0", None):
            blk.line(line)
    v = sp[i]
    blk.comment(f"band row r of phase rd: output rows ({v}0 * {rows} + r) * {stride} + rd, "
                f"stepping {rows * stride}; rlast[rd] of the tile's last group are outputs")
    blk.line(f"for r in range({rows}):")
    blk.indent()
    blk.line(f"for rd in range({stride}):")
    blk.indent()
    blk.line(f"cnt = {v}sz if r < rlast[rd] else {v}sz - 1")
    blk.line("if cnt > 0:")
    blk.indent()
    row = f"({v}0 * {rows} + r) * {stride} + rd"
    where = [f"{row}:{row} + (cnt - 1) * {rows * stride} + 1:{rows * stride}" if j == i
             else f"nl.ds({u}0, {u}sz)" for j, u in enumerate(sp)]
    tile = ["0:cnt, rd" if j == i else f"0:{u}sz" for j, u in enumerate(sp)]
    blk.line(f"nl.store(out_v[n, g, 0:{cout}, {', '.join(where)}], "
             f"res[r * {cout}:(r + 1) * {cout}, {', '.join(tile)}])")
    for _ in range(3):
        blk.dedent()
    args = ", ".join(f"{u}0, {u}sz" for u in sp)
    head = "x_sb, w_sb, " + ("b_sb, " if bias else "") + "out_v, n, g"
    kernel.helpers.append([
        f"def {fn}({head}, c0, csz, {args}, rlast):",
        '    """Output rows of a band (columns r * cout + co) at one tile, phase by phase; '
        'the banded dim counted in groups of rows."""',
        *blk.lines,
    ])
    return fn
