"""Convolution on the Tensor Engine: a sum over kernel taps of shifted matmuls in PSUM.

For one group, batch element and output tile, every tap t contributes
`w[:, :, t].T @ window_t(x)`: the input channels (<= 128) contract on the partitions, the
output channels (<= 128 per tile) are the stationary side and up to 512 output positions
the moving side, all taps accumulating into one fp32 PSUM tile. `window_t` is a strided
view of the zero-padded input plane held in SBUF (start `o * stride + k * dilation`).

A transposed convolution is the same sum over a zero-*inserted* plane: input element i
lands at `i * stride + dilation * (K - 1) - padding`, the windows have step 1 and the taps
run flipped (a strided one runs by output phase over the original plane instead when it
fits: convphase.py). Weights are loaded once per group and stay resident across batch elements
and output tiles; the input plane is loaded once per batch element.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.conv import (
    affinehead,
    convband,
    convload,
    convphase,
    convpool,
    convslab,
    convtail,
    depthwise,
    phaseprefix,
)
from nkibot.lowering.emit.conv.epilogue import (
    EVICT_ACT,
    Epilogue,
    as_tail,
    emit_folded_norm,
    emit_steps,
    eviction_busy,
    find_epilogue,
    leaf_arg,
)
from nkibot.lowering.emit.fused import PASS_NS
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op, Ref
from nkibot.lowering.schedule import bandfold, convfold, phasefold
from nkibot.lowering.schedule.convfold import Fold, grouped
from nkibot.lowering.schedule.convspec import (
    FLAT_BAND_ROWS,
    PLANE_BUDGET,
    Banks,
    ConvSpec,
    bank_split,
    check,
    conv_spec,
    out_tiles,
    tile_sizes,
)
from nkibot.lowering.schedule.layout import LayoutError, Resolved
from nkibot.lowering.schedule.phasefold import PhaseBlocks, PhaseFold, choose_fold

_leaf = leaf_arg
#: The variant decision that stages a conv's tail instead (Kernel.choices).
TAIL_DECISION = "conv tail"
#: The affine head on the eviction (the default) or in the tail: a variant the optimize
#: phase times (level 2 32: its channel fold modelled 2,720 -> 3,066 us with the head taken,
#: for a Scalar pass a tile fewer).
HEAD_DECISION = "conv eviction head"
#: Output channels a group below which a grouped conv's tail, pool or fold is staged.
TAIL_MIN_CHANNELS = 2


def emit_conv(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    """A lone conv, or a chain of convs each reading the previous one's result (e.g. a
    depthwise-separable block): every conv but the last writes an fp32 HBM scratch tensor.
    A single conv may carry an eval BatchNorm and an activation, applied on its PSUM
    eviction (`Epilogue`)."""
    convs = [op for op in res.ops if op.op == "conv"]
    epi = find_epilogue(res, convs[0], outputs) if len(convs) == 1 else None
    if epi is not None:
        x, shape, dtype = _input(res, convs[0])
        _emit_one(res, convs[0], kernel, x, shape, dtype, outputs[0], epi)
        return
    if len(convs) != len(res.ops) or len(outputs) != 1 or (
            res.target(outputs[0].name) != convs[-1].name):
        raise LayoutError("a convolution with other ops in the graph (a lone conv, or a "
                          "chain of convs, each with its bias, is lowered; one conv with an "
                          "eval BatchNorm and/or an activation on its eviction)")
    x = _leaf(res, convs[0].args[0], "input")
    x_leaf = res.graph.leaf(x)
    assert x_leaf is not None
    source, shape, dtype = x, x_leaf.shape, x_leaf.dtype
    for i, op in enumerate(convs):
        prev = op.args[0]
        if i and (not isinstance(prev, Ref) or res.target(prev.name) != convs[i - 1].name):
            raise LayoutError("convolutions that do not form a chain")
        out = outputs[0]
        if i < len(convs) - 1:
            out = Output(op.name, kernel.names.fresh("mid"), op.shape, "float32")
            kernel.body.comment(f"{op.origin}'s result, read by the next convolution: an fp32 "
                                "HBM scratch tensor")
            kernel.body.line(f"{out.var} = nl.ndarray({op.shape!r}, dtype=nl.float32, "
                             "buffer=nl.hbm)")
        _emit_one(res, op, kernel, source, shape, dtype, out)
        source, shape, dtype = out.var, op.shape, "float32"


def _input(res: Resolved, conv: Op) -> tuple[str, tuple[int, ...], str]:
    x = _leaf(res, conv.args[0], "input")
    leaf = res.graph.leaf(x)
    assert leaf is not None
    return x, leaf.shape, leaf.dtype


def _phase_unbanded(spec: ConvSpec, elem: int) -> bool:
    """Whether a conv run by phase takes the phase fold or blocks form (convphase.py), not
    the banded one, whose evictions take only the bias."""
    stacked = bandfold.stack(spec, elem, phased=True)
    dims = phasefold.phase_dims(stacked)
    return dims is not None and isinstance(choose_fold(stacked, dims, elem),
                                           PhaseFold | PhaseBlocks)


def _emit_one(res: Resolved, op: Op, kernel: Kernel, x: str, x_shape: tuple[int, ...],
              x_dtype: str, out: Output, epi: Epilogue | None = None) -> None:
    w = _leaf(res, op.args[1], "weight")
    bias = _leaf(res, op.args[2], "bias") if len(op.args) > 2 else None
    w_leaf = res.graph.leaf(w)
    assert w_leaf is not None
    spec = conv_spec(op, x_shape, w_leaf.shape)
    phased = phasefold.phase_dims(spec)
    by_phase = phased is not None and phasefold.faster(spec, phased)
    compute = nl_dtype(x_dtype) if x_dtype in ("bfloat16", "float16") and (
        w_leaf.dtype == x_dtype) else "nl.float32"
    elem = 2 if compute != "nl.float32" else 4
    tail: convtail.TailCall | None = None
    fused: convpool.Fused | None = None
    prefix: phaseprefix.PhasePrefix | None = None
    if epi is not None and by_phase and epi.prefix:
        epi = as_tail(res, op, epi) or epi  # its activations and clamps as tail ops
    if epi is not None and (epi.tail or epi.reduce or epi.window) and (
            spec.groups > 1 and spec.cout_g < TAIL_MIN_CHANNELS):
        # a tile of a few channels carries the tail's whole per-tile cost (its parameter
        # loads, one instruction per op) for a few partitions' work: level 3 22's 1-channel
        # groups ran 3.6M GpSimd instructions fused (302 ms modelled) against 13.6 ms staged
        raise LayoutError(f"{epi.origins} after a conv of {spec.cout_g} output channels a group "
                          "(staged instead: its tiles are too small to carry them)")
    if epi is not None and epi.norm is None and not (
            epi.steps or epi.residual or by_phase or depthwise.fits(spec)):
        head = affinehead.find(res, op, epi.tail)
        if head is not None and (HEAD_DECISION, "tail") not in kernel.alternatives:
            kernel.alternatives.append((HEAD_DECISION, "tail"))
        if kernel.choices.get(HEAD_DECISION) == "tail":
            head = None
        if head is not None:  # the eviction's (scale, shift) does the tail's head
            bias = affinehead.emit_table(kernel, head, bias, spec.cout, op.origin)
            epi = replace(epi, affine=head.ops, tail=epi.tail[len(head.ops):],
                          tail_from=head.ops[-1].name)
    if epi is not None and (epi.reduce is not None or epi.window is not None):
        if kernel.choices.get(TAIL_DECISION) == "staged":
            raise LayoutError(f"{epi.origins}: the pool or reduction staged (a variant)")
        if epi.window is not None:
            fused = convpool.window_form(res, kernel, op, epi, out)
        elif not epi.channels:
            fused = convpool.pool_form(res, kernel, op, epi, out)
        elif spec.groups > 1 or spec.cout > PMAX or depthwise.fits(spec):
            raise LayoutError("a channel reduction fused into a grouped or depthwise conv, or "
                              "one of over 128 output channels (staged instead)")
        else:
            fused = convpool.channel_form(res, kernel, op, epi, out)
        out = Output(out.name, out.var, out.shape, "float32")  # the pool's helper casts
        if (TAIL_DECISION, "staged") not in kernel.alternatives:
            kernel.alternatives.append((TAIL_DECISION, "staged"))
    if epi is not None:
        if (by_phase and epi.prefix) or (depthwise.fits(spec) and (
                epi.residual is not None or spec.cout != spec.cin or epi.tail or fused)):
            raise LayoutError(f"{epi.origins} on a transposed conv's eviction, or a residual, "
                              "a channel multiplier or a tail on a depthwise one's (staged "
                              "instead)")
        if epi.norm is not None:
            bias = emit_folded_norm(res, kernel, epi.norm, bias, spec.cout, op.origin)
        if epi.tail:
            if kernel.choices.get(TAIL_DECISION) == "staged":
                raise LayoutError(f"{epi.origins}: the tail staged (a variant)")
            chain = [op.name, *([epi.norm.name] if epi.norm is not None else []),
                     *(o.name for o in epi.affine), *(step.name for step in epi.steps)]
            assert chain[-1] == epi.tail_from, (chain, epi.tail_from)
            pre = Output(epi.tail[-1].name, out.var, op.shape, "float32") if (
                fused is not None) else out
            # a plain tile's eviction runs before the tail; a phase's follows its load
            before = None
            ops = epi.tail
            if not by_phase:
                before = eviction_busy(epi)
                before["vector"] += convpool.vector_load(fused)
            elif _phase_unbanded(spec, elem):
                prefix = phaseprefix.find(res, op, epi.tail)
                if prefix is not None:  # the tail starts after it
                    chain += [o.name for o in prefix.ops]
                    ops = epi.tail[len(prefix.ops):]
                    if not prefix.relu:  # every phase evicts on the Vector Engine
                        before = {"vector": PASS_NS["vector"], "scalar": 0.0}
            tail = convtail.emit_tail(res, kernel, op, chain, ops, pre, before=before) if (
                ops) else None
            if tail is not None:
                out = Output(out.name, out.var, out.shape, "float32")  # the tail casts
            if (TAIL_DECISION, "staged") not in kernel.alternatives:
                # the tail shares the eviction's engines: on a form whose eviction already
                # loads them (phase by phase), a stage of its own over big tiles can be
                # faster; the optimize phase times both and keeps the faster
                kernel.alternatives.append((TAIL_DECISION, "staged"))
    if depthwise.fits(spec):
        depthwise.emit_depthwise(kernel, spec, op.origin, x, w, bias, out, epi)
        return
    slab = check(spec, x_dtype)
    band_spec = spec
    kind = "transposed convolution" if spec.transposed else "convolution"
    kernel.body.comment(f"{op.origin}: {kind}, groups={spec.groups}, {spec.taps} taps")
    if by_phase:
        if fused is not None:
            raise LayoutError("a pool or reduction on a transposed conv run phase by phase "
                              "(staged instead)")
        spec = bandfold.stack(spec, elem, phased=True)
        phased = phasefold.phase_dims(spec)
        assert phased is not None
        convphase.emit_phased(kernel, spec, phased, (x, w, bias), out, compute, tail, prefix)
        return
    if slab is None and epi is None:
        spec = bandfold.stack(spec, elem, phased=False)
    fold = convfold.choose(spec, elem)
    if slab is None and epi is None:
        fold = bandfold.choose(spec, fold, elem, PLANE_BUDGET // 4)
    resid = epi.residual if epi is not None else None
    extra = (("r_v",) if resid is not None else ()) + (tail.views if tail else ())
    if isinstance(fused, convpool.AcrossForm | convpool.WindowForm) and fused.after:
        extra = tuple(dict.fromkeys(extra + fused.after.views))
    windows = None
    if isinstance(fused, convpool.WindowForm) and slab is not None:
        band_spec, slab = convpool.window_bands(spec, slab, fused)
        windows = (fused.kernel, fused.pooled, fused.tiles)
    if isinstance(fused, convpool.PoolForm):
        if spec.cout_g > PMAX:
            raise LayoutError("a global pool fused into a conv of over 128 output channels a "
                              "group (staged instead)")
        extra += ("part",)
    banks = bank_split(spec) if slab is None and fold.rows == 1 and fused is None else None
    if slab is not None and windows is None and convslab.flat(spec, fold, len(slab)):
        slab = check(spec, x_dtype, FLAT_BAND_ROWS) or slab
    if slab is not None and fold.rows == 1 and fused is None:
        slab, banks = _slab_banks(spec, slab)
    tile_fn = _emit_tile_helper(kernel, spec, bias is not None, out.dtype,
                                (slab, fold), epi, (extra, tail), fused, banks)
    pair = epi is not None and epi.pair
    if slab is not None:
        bands = convslab.emit_helpers(kernel, band_spec, slab, bias is not None, tile_fn,
                                      compute, fold, extra, windows)
        _emit_body(kernel, spec, x, w, bias, out, bands, compute, slab, fold, pair,
                   (resid, extra), fused, band_spec)
    else:
        _emit_body(kernel, spec, x, w, bias, out, {(): tile_fn}, compute, None, fold, pair,
                   (resid, extra), fused, banks=banks)


def _slab_banks(spec: ConvSpec, slab: convslab.Slab) -> tuple[convslab.Slab, Banks | None]:
    """A band's tiles span PSUM banks as a plane's do (`bank_split`), when a band of dim 0
    alone holds several tiles' rows and dim 0 is the one a tile covers in part: the slab's
    tile grows to the banks' rows. Level 2 54 stored 2-row tiles (runs of 2 KiB) and
    evicted each with its own instructions."""
    split = bank_split(spec)
    if len(slab) != 1 or split is None or split[0] != 0:
        return slab, None
    rows, tile = slab[0]
    n = min(split[2], rows // tile)
    if n < 2:
        return slab, None
    return ((rows, n * tile),), (0, tile, n)


def _emit_tile_grid(body: Block, spec: ConvSpec, fold: Fold, has_bias: bool,
                    tile_fn: str, extra: tuple[str, ...] = (),
                    fused: convpool.Fused | None = None, banks: Banks | None = None) -> None:
    """The output tiles over the loaded plane x_sb (channels x positions), then a global
    pool's fold of their partials; closes the batch and group loops the caller opened."""
    sp = _sp(spec)
    params = "x_sb, w_sb, " + ("b_sb, " if has_bias else "") + convload.out_views(extra) + ", n, g"
    if fold.rows > 1:
        convband.emit_tile_grid(body, spec, fold, out_tiles(grouped(spec, fold)), params, tile_fn)
    else:
        pool = fused if isinstance(fused, convpool.PoolForm) else None
        fields = ", ".join(f"{{{v}0}}, {{{v}sz}}" for v in ["c", *sp])
        axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, d.size_out, t) for v, d, t in zip(
            sp, spec.dims, tile_sizes(spec, banks), strict=True)]
        if isinstance(fused, convpool.WindowForm):
            # the grid runs over pooled positions: a conv tile is k times as long per dim
            fields = "{c0}, {csz}, " + ", ".join(
                f"{{{v}0}} * {k}, {{{v}sz}} * {k}" for v, k in zip(sp, fused.kernel,
                                                                    strict=True))
            fields += "".join(f", {{{v}0}}, {{{v}sz}}" for v in sp)
            axes = [Axis("c", spec.cout_g, PMAX)] + [Axis(v, p, t) for v, p, t in zip(
                sp, fused.pooled, fused.tiles, strict=True)]
        if pool is not None:
            convpool.emit_partials(body, spec, pool, convpool.tile_count(spec))
        emit_grid(body, axes, f"{tile_fn}({params}, {fields}" + (", {t})" if pool else ")"),
                  "affine_range", index=() if pool else None)
        if pool is not None:
            convpool.emit_fold(body, spec, pool, convpool.tile_count(spec))
    body.dedent()
    body.dedent()


def _sp(spec: ConvSpec) -> list[str]:
    return [f"s{i}" for i in range(len(spec.dims))]


def _fold_note(spec: ConvSpec, fold: Fold) -> str:
    taps = " x ".join(str(f) for f in fold.sizes)
    if fold.rows > 1:
        return (f"; {taps} blocks on the partitions (block u: the plane shifted by u), "
                f"{fold.rows} output rows of dim {fold.band} on the columns, each row's "
                "taps along the band (a banded weight matrix: few output channels fill "
                "few columns)")
    return (f"; {taps} taps stacked on the partitions (block u holds tap j * f + u"
            + (", flipped" if spec.transposed else "") + ")" if fold.blocks > 1 else "")


def _emit_body(kernel: Kernel, spec: ConvSpec, x: str, w: str, bias: str | None, out: Output,
               fns: dict[tuple[int, ...], str], compute: str, slab: convslab.Slab | None,
               fold: Fold, pair: bool = False,
               reads: tuple[str | None, tuple[str, ...]] = (None, ()),
               fused: convpool.Fused | None = None, band_spec: ConvSpec | None = None,
               banks: Banks | None = None) -> None:
    """Weights, then per batch element the plane (or its bands) and the output tiles;
    `fns` maps each band's row counts to its helper (no bands: () to the tile helper);
    `banks`: the dim a tile splits between two PSUM banks and its rows a bank
    (`bank_split`), None for one bank."""
    body = kernel.body
    resid, extra = reads
    convload.emit_views(body, spec, x, w, bias, out, pair, convpool.out_dims(fused, spec))
    pool = fused if isinstance(fused, convpool.PoolForm) else None
    if resid is not None:
        outs = ", ".join(str(d.size_out) for d in spec.dims)
        body.line(f"r_v = {resid}.reshape(({spec.batch}, {spec.groups}, {spec.cout_g}, {outs}))")
    body.line(f"for g in nl.affine_range({spec.groups}):")
    body.indent()
    body.comment("weights stay resident for every batch element and output tile of group g"
                 + _fold_note(spec, fold))
    convload.emit_weights(body, spec, fold, compute)
    if bias is not None:
        convload.emit_resident_bias(body, spec, 2 if pair else 1, fold.rows)
    body.line(f"for n in nl.affine_range({spec.batch}):")
    body.indent()
    if slab is not None:
        head = "x_v, w_sb, " + ("b_sb, " if bias is not None else "") + convload.out_views(
            extra) + ", n, g"
        finish = None
        if pool is not None:
            convpool.emit_partials(body, spec, pool, convslab.band_count(spec, slab))
            finish = lambda count: convpool.emit_fold(body, spec, pool, count)  # noqa: E731
        convslab.emit_bands(body, band_spec or spec, slab, head, fns, fold, finish)
        return
    convload.emit_plane(body, spec, fold, compute)
    _emit_tile_grid(body, spec, fold, bias is not None, fns[()], extra, fused, banks)


def _emit_tile_helper(kernel: Kernel, spec: ConvSpec, bias: bool, out_dtype: str,
                      form: tuple[convslab.Slab | None, Fold], epi: Epilogue | None = None,
                      reads: tuple[tuple[str, ...], convtail.TailCall | None] = ((), None),
                      fused: convpool.Fused | None = None, banks: Banks | None = None) -> str:
    slab, fold = form
    banded = len(slab) if slab else 0
    extra, tail = reads
    fn = kernel.names.fresh("conv_tile")
    blk = Block(depth=1)
    sp = _sp(spec)
    sizes = ", ".join(f"{v}sz" for v in sp)
    halves = _bank_halves(sp, banks)
    note = ("tap: a shifted" + (", strided" if any(d.step > 1 for d in spec.dims) else "")
            + " window of the plane; PSUM accumulates over the taps" + (
                f" ({fold.blocks} taps contract on the partitions; the last base tap of "
                "a ragged fold contracts only its valid blocks)" if fold.blocks > 1 else ""))
    if banks is not None:
        k, rows, n = banks
        blk.comment(f"{n} PSUM banks a tile, {rows} rows of dim {k} each (acc, acc1, ...): "
                    "each its own matmuls and eviction; one tail and one store for all")
        blk.line(f"h = min(s{k}sz, {rows})")
    for acc, span, _, guard in halves:
        shape = ", ".join(span[2] if i == span[0] else f"{v}sz" for i, v in enumerate(sp))
        with _bank(blk, guard):
            blk.line(f"{acc} = nl.ndarray((csz, {shape}), dtype=nl.float32, buffer=nl.psum)")
            if not guard:
                blk.comment(note)
            _emit_matmuls(blk, spec, fold, [], spec.cin_g * fold.blocks, acc, span)
    blk.line(f"res = nl.ndarray((csz, {sizes}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    starts = convslab.band_starts(banded)  # a slab's tiles are relative to its first rows
    index = [f"nl.ds({starts[i] + ' + ' if i < banded else ''}{v}0, {v}sz)"
             for i, v in enumerate(sp)]
    if epi is not None:
        if fold.rows > 1:
            raise LayoutError(f"{epi.origins} on a banded conv's eviction (staged instead)")
        _emit_eviction(blk, epi, spec if bias else None, index, halves)
        tiles = [t for _, t in slab] if slab else list(tile_sizes(spec, banks))
        tiles += list(out_tiles(spec))[len(tiles):]
        if isinstance(fused, convpool.WindowForm):
            tiles = [t * k for t, k in zip(fused.tiles, fused.kernel, strict=True)]
        first = f"{starts[0]} + s00" if banded else "s00"
        flat = convtail.flat_start([d.size_out for d in spec.dims], tiles, first) if (
            banded <= 1) else None
        channel = f"g * {spec.cout_g} + c0" if spec.groups > 1 else "c0"
        if tail is not None:
            for line in tail.call([f"{v}sz" for v in sp], channel, flat):
                blk.line(line)
        if isinstance(fused, convpool.AcrossForm):
            convpool.emit_channel_fold(blk, fused, [f"{v}sz" for v in sp], flat)
        elif isinstance(fused, convpool.WindowForm):
            first = f"{starts[0]} // {fused.kernel[0]} + p00" if banded else "p00"
            flat = convtail.flat_start(list(fused.pooled), list(fused.tiles), first) if (
                banded <= 1) else None
            convpool.emit_window(blk, fused, sp, flat, channel)
    elif fold.rows > 1:
        convband.emit_store(blk, spec, fold, bias, index)
    elif bias:
        blk.line(f"b_t = {convload.bias_cols(spec, '0:1')}")
        blk.comment("bias: one value per output channel (partition)")
        for acc, _, dst, guard in halves:
            with _bank(blk, guard):
                blk.line(f"nisa.tensor_scalar(dst={dst}, data={acc}, op0=nl.add, operand0=b_t)")
    else:
        for acc, _, dst, guard in halves:
            with _bank(blk, guard):
                blk.line(f"nisa.tensor_copy(dst={dst}, src={acc})")
    pooled = isinstance(fused, convpool.PoolForm)
    if isinstance(fused, convpool.PoolForm):
        q = " * ".join(f"{v}sz" for v in sp)
        blk.comment("the tile's partial of the global pool: one value per channel, column t")
        blk.line(f"nisa.tensor_reduce(dst=part[0:csz, nl.ds(t, 1)], op={fused.fold}, "
                 f"data=res.reshape((csz, {q})), axis=1)")
    elif isinstance(fused, convpool.AcrossForm):
        blk.line(f"nl.store(out_v[n, g, 0:1, {', '.join(index)}], res)")
    elif isinstance(fused, convpool.WindowForm):
        pooled_at = ", ".join(f"nl.ds({starts[i]} // {k} + p{i}0, p{i}sz)" if i < banded else
                              f"nl.ds(p{i}0, p{i}sz)" for i, k in enumerate(fused.kernel))
        blk.line(f"nl.store(out_v[n, g, nl.ds(c0, csz), {pooled_at}], res)")
    elif fold.rows == 1:
        blk.line(f"nl.store(out_v[n, g, nl.ds(c0, csz), {', '.join(index)}], res)")
    args = ", ".join(f"{v}0, {v}sz" for v in sp) + (", rlast" if fold.rows > 1 else "") + (
        ", t" if pooled else "") + "".join(f", p{i}0, p{i}sz" for i in range(len(sp)) if (
            isinstance(fused, convpool.WindowForm)))
    head = "x_sb, w_sb, " + ("b_sb, " if bias else "") + convload.out_views(extra) + ", n, g" + (
        "".join(f", {z}" for z in starts))
    kernel.helpers.append([
        f"def {fn}({head}, c0, csz, {args}):",
        '    """Output channels c0..c0+csz (of group g) at one tile of output positions."""',
        *blk.lines,
    ])
    return fn


#: One PSUM bank of a tile: its PSUM tile, (the split dim, its start, its rows), the SBUF
#: view it is evicted to, and the condition the bank's code runs under ("": always).
Half = tuple[str, tuple[int, str, str], str, str]


def _bank_halves(sp: list[str], banks: Banks | None) -> list[Half]:
    """The banks of a tile: one, or as many as it spans (`h` rows of the split dim each;
    a later bank only when the tile has rows for it, the last one takes the rest)."""
    if banks is None:
        return [("acc", (0, "s00", "s0sz"), "res", "")]
    k, _, n = banks
    v = sp[k]

    def view(rows: str) -> str:
        return "res[0:csz, " + ", ".join(rows if i == k else f"0:{u}sz"
                                         for i, u in enumerate(sp)) + "]"

    out = [("acc", (k, f"{v}0", "h"), view("0:h"), "")]
    for b in range(1, n):
        lo = "h" if b == 1 else f"{b} * h"
        last = b == n - 1
        count = f"({v}sz - {lo})" if last else f"min({v}sz - {lo}, h)"
        stop = f"{v}sz" if last else f"{lo} + {count}"
        out.append((f"acc{b}", (k, f"({v}0 + {lo})", count), view(f"{lo}:{stop}"),
                    f"if {v}sz > {lo}:"))
    return out


@contextmanager
def _bank(blk: Block, guard: str) -> Iterator[None]:
    """The lines written inside run under the bank's `guard` (none for the first bank)."""
    if guard:
        blk.line(guard)
        blk.indent()
    yield
    if guard:
        blk.dedent()


def _emit_eviction(blk: Block, epi: Epilogue, bias: ConvSpec | None, index: list[str],
                   halves: list[Half]) -> None:
    """PSUM -> SBUF: the folded BatchNorm (or the bias), a residual right after it and the
    first activation in one Scalar Engine `activation` (the residual by one Vector
    instruction before it), per PSUM bank of the tile (`halves`); later steps once, on the
    SBUF tile (`bias`: the conv's spec when it has a bias or a folded norm, whose columns
    the tile reads from the resident b_sb)."""
    steps = list(epi.steps)
    scale = shift = None
    if epi.pair:
        assert bias is not None  # the norm's (or affine head's) table is the bias
        scale, shift = convload.bias_cols(bias, "0:1"), convload.bias_cols(bias, "1:2")
    elif bias is not None:
        blk.line(f"b_t = {convload.bias_cols(bias, '0:1')}")
        shift = "b_t"
    residual = bool(steps) and steps[0].op == "add"
    origin = steps[0].origin if residual else ""
    if residual:
        steps.pop(0)
    fn = "nl.copy"
    if steps and steps[0].op in EVICT_ACT:
        fn = EVICT_ACT[steps.pop(0).op]
    for acc, (k, start, rows), dst, guard in halves:
        with _bank(blk, guard):
            data, mul = acc, scale
            if residual:
                at = [f"nl.ds({start}, {rows})" if len(halves) > 1 and i == k else ix
                      for i, ix in enumerate(index)]
                blk.line(f"r_t = nl.load(r_v[n, g, nl.ds(c0, csz), {', '.join(at)}], "
                         "dtype=nl.float32)")
                blk.line("y = nl.ndarray(r_t.shape, dtype=nl.float32, buffer=nl.sbuf)")
                if mul is not None:
                    blk.comment(f"{origin}: acc * scale + residual on the Vector Engine")
                    blk.line(f"nisa.scalar_tensor_tensor(dst=y, data={acc}, op0=nl.multiply, "
                             f"operand0={mul}, op1=nl.add, operand1=r_t)")
                else:
                    blk.comment(f"{origin}: acc + residual on the Vector Engine")
                    blk.line(f"nisa.tensor_tensor(dst=y, data1={acc}, data2=r_t, op=nl.add)")
                data, mul = "y", None
            args = "".join(f", {a}={v}" for a, v in (("scale", mul), ("bias", shift)) if v)
            if not guard:
                blk.comment(f"eviction: {fn}({'y' if residual else 'acc'}"
                            + (" * scale" if mul else "") + (" + shift" if shift else "")
                            + f") per output channel on the Scalar Engine ({epi.origins})")
            blk.line(f"nisa.activation(dst={dst}, op={fn}, data={data}{args})")
    emit_steps(blk, steps, f"r_v[n, g, nl.ds(c0, csz), {', '.join(index)}]")


def _emit_matmuls(blk: Block, spec: ConvSpec, fold: Fold, ks: list[str], rows: int,
                  acc: str = "acc", span: tuple[int, str, str] = (0, "s00", "s0sz")) -> None:
    """The matmul loops from dim len(ks) in: a loop over each dim's base taps; the one
    ragged dim (convfold.choose) runs its last base tap apart, on the prefix of blocks whose
    taps exist, so no matmul reads a block past the kernel's edge. Into PSUM tile `acc`,
    over `span`'s positions of its dim (dim, start, count: one bank of a two-bank tile)."""
    i = len(ks)
    if i == len(spec.dims):
        where = [(str(j - 1 - int(k)) if k.isdigit() else f"{j - 1} - {k}")
                 if spec.transposed else k for k, j in zip(ks, fold.outer, strict=True)]
        windows = []
        for i, (v, d, k, f) in enumerate(zip(_sp(spec), spec.dims, ks, fold.sizes,
                                             strict=True)):
            shift = "" if k == "0" else (f" + {int(k) * f * d.dil}" if k.isdigit() else
                                         f" + {k} * {f * d.dil}")
            step = fold.rows if i == fold.band else d.step  # a band steps over its groups
            v0, vsz = span[1:] if i == span[0] else (f"{v}0", f"{v}sz")
            start = f"{v0} * {step}{shift}" if step > 1 else f"{v0}{shift}"
            stop = f"({vsz} - 1) * {step} + 1:{step}" if step > 1 else vsz
            windows.append(f"{start}:{start} + {stop}")
        blk.line(f"nisa.nc_matmul({acc}, w_sb[0:{rows}, nl.ds(c0, csz), {', '.join(where)}], "
                 f"x_sb[0:{rows}, {', '.join(windows)}])")
        return
    j, f, taps = fold.outer[i], fold.sizes[i], fold.taps[i]
    full = j - 1 if fold.ragged(i) else j
    if full > 1:
        blk.line(f"for k{i} in nl.affine_range({full}):")
        blk.indent()
        _emit_matmuls(blk, spec, fold, [*ks, f"k{i}"], rows, acc, span)
        blk.dedent()
    elif full == 1:
        _emit_matmuls(blk, spec, fold, [*ks, "0"], rows, acc, span)
    if fold.ragged(i):
        _emit_matmuls(blk, spec, fold, [*ks, str(j - 1)], rows // f * (taps - (j - 1) * f),
                      acc, span)
