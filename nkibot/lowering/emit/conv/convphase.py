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

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.conv import convload, convphaseband, convtail, phaseprefix
from nkibot.lowering.emit.conv.convload import emit_empty_phase, emit_evict, emit_tap_loop
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.schedule import convfold, phasefold
from nkibot.lowering.schedule.convspec import ConvSpec, Dim
from nkibot.lowering.schedule.layout import LayoutError
from nkibot.lowering.schedule.phasefold import (
    Phase,
    PhaseBlocks,
    PhaseDim,
    PhaseFold,
    choose_fold,
)


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
        convload.zero_weights(body, spec, f"w_p{ph.r}")
        for u in range(min(fold.f, ph.count)):
            n = -(-(ph.count - u) // fold.f)
            lo, step = ph.first + (ph.count - 1 - u - (n - 1) * fold.f) * ph.step, fold.f * ph.step
            src = [f"0:{k}" for k in ks]
            src[i] = f"{lo}:{lo + step * (n - 1) + 1}" + (f":{step}" if n > 1 else "")
            dst = [f"0:{k}" for k in ks]
            dst[i] = f"{j - n}:{j}"
            convload.weight_copy(body, spec, f"w_p{ph.r}", (u * cin, 0), (dst, src))
    body.line(f"w_sb = ({', '.join(names)},)")


def _emit_block_weights(body: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                        fold: PhaseBlocks, compute: str) -> None:
    """w_p{r..}: the weights of each combination of the folded dims' phases (PhaseBlocks'
    layout), zeroed first where a base contracts blocks that are not its taps; the dims
    not folded keep every tap at its own index. w_sb lists them row-major."""
    cin, folded = spec.cin_g, fold.folded
    ks = [str(d.taps) for d in spec.dims]
    names = []
    for combo in itertools.product(*(dims[i].phases for i in folded)):
        if any(not ph.count for ph in combo):
            names.append("None")
            continue
        at = dict(zip(folded, combo, strict=True))
        js = {i: -(-ph.count // fold.sizes[i]) for i, ph in at.items()}
        name = "w_p" + "_".join(str(ph.r) for ph in combo)
        names.append(name)
        shape = ", ".join(str(js[i]) if i in at else k for i, k in enumerate(ks))
        body.line(f"{name} = nl.ndarray(({cin * fold.blocks}, {spec.cout_g}, {shape}), "
                  f"dtype={compute}, buffer=nl.sbuf)")
        full = tuple(at[i] if i in at else Phase(0, 0, 1, 1, 0, 0)
                     for i in range(len(spec.dims)))
        if fold.holes(full) or spec.stack > 1:
            body.comment("blocks a base contracts that are none of its taps hold zeros")
            body.line(f"nisa.memset(dst={name}, value=0.0, engine=nisa.engine.gpsimd)")
        for b, u in enumerate(itertools.product(*(range(f) for f in fold.sizes))):
            dst, src = [f"0:{k}" for k in ks], [f"0:{k}" for k in ks]
            for i, ph in at.items():
                f = fold.sizes[i]
                n = -(-(ph.count - u[i]) // f) if u[i] < ph.count else 0
                if n == 0:
                    break
                lo, step = ph.first + (ph.count - 1 - u[i] - (n - 1) * f) * ph.step, f * ph.step
                src[i] = f"{lo}:{lo + step * (n - 1) + 1}" + (f":{step}" if n > 1 else "")
                dst[i] = f"{js[i] - n}:{js[i]}"
            else:
                convload.weight_copy(body, spec, name, (b * cin, 0), (dst, src))
    body.line(f"w_sb = ({', '.join(names)},)")


def emit_phased(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                names: tuple[str, str, str | None], out: Output, compute: str,
                tail: convtail.TailCall | None = None,
                prefix: phaseprefix.PhasePrefix | None = None) -> None:
    """Weights resident per group; per batch element the original plane (zero margins
    only) and the output tiles, each computed phase by phase (then the tail, if any, on
    each whole tile). `prefix`: the tail's head the evictions take (phaseprefix.py; not
    in the banded form)."""
    x, w, bias = names
    body = kernel.body
    fold = choose_fold(spec, dims, 4 if compute == "nl.float32" else 2)
    if not isinstance(fold, PhaseFold | PhaseBlocks):
        assert prefix is None, "the banded form's evictions take the bias only"
        if tail is not None and tail.views:
            raise LayoutError("a tail reading tensors after a banded phase-by-phase "
                              "transposed convolution (its partitions are rows x channels; "
                              "staged instead)")
        convphaseband.emit(kernel, spec, dims, fold, names, out, compute, tail)
        return
    columns = bias is not None or (prefix is not None and bool(prefix.adds))
    fn = _emit_tile(kernel, spec, dims, (columns, out.dtype), fold, tail, prefix)
    convload.emit_views(body, spec, x, w, bias, out)
    body.line(f"for g in nl.affine_range({spec.groups}):")
    body.indent()
    if isinstance(fold, PhaseBlocks):
        body.comment("weights stay resident for every batch element and output tile of group "
                     "g, one tile per phase combination of dims "
                     f"{', '.join(map(str, fold.folded))} ("
                     f"{' x '.join(str(fold.sizes[i]) for i in fold.folded)} taps a matmul, "
                     "stacked on the partitions)")
        _emit_block_weights(body, spec, dims, fold, compute)
    else:
        body.comment("weights stay resident for every batch element and output tile of group "
                     f"g, one tile per phase of dim {fold.dim}" + (
                         f" ({fold.f} taps a matmul, stacked on the partitions)" if fold.f > 1
                         else ""))
        _emit_weights(body, spec, dims, fold, compute)
    if bias is not None:
        convload.emit_resident_bias(body, spec, 1)
    if prefix is not None:
        phaseprefix.emit_fold(body, spec, prefix, bias is not None)
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    body.comment("by output phase: the ORIGINAL input plane, padded only where a phase's "
                 "taps read past it (no zero insertion)")
    sizes = fold.sizes if isinstance(fold, PhaseBlocks) else tuple(
        fold.f if i == fold.dim else 1 for i in range(len(dims)))
    plane = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups, tuple(
        Dim(d.size_in, p.plane, 1, 1, max(ph.shift for ph in p.phases), 1, p.lead)
        for d, p in zip(spec.dims, dims, strict=True)), False, spec.stack)
    # blocks a base contracts past its taps are read (times zero weights): all finite
    whole = isinstance(fold, PhaseBlocks) and any(
        fold.holes(combo) for combo in itertools.product(*(p.phases for p in dims)))
    convload.emit_plane(body, plane, convfold.Fold(sizes, sizes), compute, whole)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    views = convload.out_views(tail.views if tail else ())
    params = "x_sb, w_sb, " + ("b_sb, " if columns else "") + f"{views}, n, g"
    fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
    axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
        sp, spec.dims, phasefold.phase_tiles(spec, dims), strict=True)]
    emit_grid(body, axes, f"{fn}({params}, {fields})", "affine_range")
    body.dedent()
    body.dedent()


def _emit_tile(kernel: Kernel, spec: ConvSpec, dims: tuple[PhaseDim, ...],
               out: tuple[bool, str], fold: PhaseFold | PhaseBlocks,
               tail: convtail.TailCall | None,
               prefix: phaseprefix.PhasePrefix | None = None) -> str:
    bias, out_dtype = out
    fn = kernel.names.fresh("conv_phase_tile")
    blk = Block(depth=1)
    sp = [f"s{i}" for i in range(len(spec.dims))]
    sizes = ", ".join(f"{v}sz" for v in sp)
    blk.line(f"res = nl.ndarray((csz, {sizes}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    if bias:
        blk.line(f"b_t = {convload.bias_cols(spec, '0:1')}")
    combos = list(itertools.product(*(p.phases for p in dims)))
    engines = phasefold.evict_engines(dict(tail.busy) if tail is not None else None,
                                      len(combos))
    bound = prefix.bound if prefix is not None else None
    if prefix is not None and bound is not None:
        blk.comment(f"{prefix.origins}: on each phase's eviction")
        if not prefix.relu:  # a Vector Engine op only
            engines = ("vector",) * len(combos)
    for combo, engine in zip(combos, engines, strict=True):
        _emit_phase(blk, spec, dims, combo, (bias, engine, bound), fold)
    index = ", ".join(f"nl.ds({v}0, {v}sz)" for v in sp)
    if tail is not None:
        flat = convtail.flat_start([d.size_out for d in spec.dims],
                                   list(phasefold.phase_tiles(spec, dims)), "s00")
        channel = f"g * {spec.cout_g} + c0" if spec.groups > 1 else "c0"
        for line in tail.call([f"{v}sz" for v in sp], channel, flat):
            blk.line(line)
    blk.comment("the whole tile, stored contiguously")
    blk.line(f"nl.store(out_v[n, g, nl.ds(c0, csz), {index}], res)")
    args = ", ".join(f"{v}0, {v}sz" for v in sp)
    head = "x_sb, w_sb, " + ("b_sb, " if bias else "") + convload.out_views(
        tail.views if tail else ()) + ", n, g"
    kernel.helpers.append([
        f"def {fn}({head}, c0, csz, {args}):",
        '    """Output channels c0..c0+csz (of group g) at one tile of output positions, '
        'phase by phase (tile starts are multiples of the stride)."""',
        *blk.lines,
    ])
    return fn


def _emit_phase(blk: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                combo: tuple[Phase, ...], evict: tuple[bool, str, convload.Bound],
                fold: PhaseFold | PhaseBlocks) -> None:
    """One output phase of the tile: its taps' matmuls over stride-1 windows of the
    original plane, then a strided copy into the tile (bias added, then the bound) on the
    engine given."""
    bias, engine, bound = evict
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
        emit_empty_phase(blk, view, bias, bound)
        return
    q = ", ".join(f"q{i}" for i in range(len(sp)))
    blk.line(f"acc = nl.ndarray((csz, {q}), dtype=nl.float32, buffer=nl.psum)")
    if isinstance(fold, PhaseBlocks):
        _emit_block_matmuls(blk, spec, dims, combo, fold)
        emit_evict(blk, view, bias, engine, bound)
        return
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
    emit_evict(blk, view, bias, engine, bound)


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


def _emit_block_matmuls(blk: Block, spec: ConvSpec, dims: tuple[PhaseDim, ...],
                        combo: tuple[Phase, ...], fold: PhaseBlocks) -> None:
    """A phase's matmuls under PhaseBlocks: one per base tap of the folded dims (written
    out: a phase has few), each contracting its blocks' rows; the dims not folded loop
    over their taps around them."""
    sp = [f"s{i}" for i in range(len(spec.dims))]
    taps, windows = [], []
    for i, (v, ph, p) in enumerate(zip(sp, combo, dims, strict=True)):
        if i in fold.folded:
            taps.append(f"{{pos{i}}}")
            windows.append(f"{{win{i}}}")
            continue
        tap, window = emit_tap_loop(blk, i, v, ph, p)
        taps.append(tap)
        windows.append(window)
    w = "w_sb[" + str(_combo_index(dims, combo, fold)) + "]"
    line = (f"nisa.nc_matmul(acc, {w}[0:{{rows}}, nl.ds(c0, csz), {', '.join(taps)}], "
            f"x_sb[0:{{rows}}, {', '.join(windows)}])")
    for base in fold.bases(combo):
        fields: dict[str, object] = {"rows": spec.cin_g * fold.rows(combo, base)}
        for i, b in zip(fold.folded, base, strict=True):
            ph, p, f = combo[i], dims[i], fold.sizes[i]
            start = f"{sp[i]}0 // {p.stride}" if p.stride > 1 else f"{sp[i]}0"
            last = ph.offset - (ph.count - 1) * ph.shift + b * f * ph.shift
            fields[f"pos{i}"] = -(-ph.count // f) - 1 - b
            fields[f"win{i}"] = f"nl.ds({start} + {last}, q{i})"
        blk.line(line.format(**fields))
    for i, ph in enumerate(combo):
        if ph.count > 1 and i not in fold.folded:
            blk.dedent()


def _combo_index(dims: tuple[PhaseDim, ...], combo: tuple[Phase, ...],
                 fold: PhaseBlocks) -> int:
    """Where the folded dims' phases of `combo` sit in w_sb (row-major)."""
    index = 0
    for i in fold.folded:
        index = index * len(dims[i].phases) + dims[i].phases.index(combo[i])
    return index
