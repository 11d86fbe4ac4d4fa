"""GroupNorm with every partition busy: rows (batch x channels) on the partitions.

`norm.py` holds one group per tile ([channels per group, positions]): with 4 channels a
group that is 4 of 128 partitions, and the cost model put KernelBench 35 at 0.009 of the
roofline. Here a tile holds whole batch elements (C * (128 // C) rows), each row one
channel's positions. Row sums are totalled per group, and broadcast back to the group's
rows, by one matmul against a block-diagonal [R, R] matrix of ones (built once: iota of
the column's group, transposed on the PE, compared). Then, per tile:

- statistics, in the form schedule/normstats picks from the cost model's figures: either
  each row's mean and variance from `bn_stats`/`bn_aggr` (one Vector Engine pass), the
  group's by Chan's parallel variance (rowstats.emit_group_moments: two one-column
  matmuls), or the row sum on the Vector Engine, group totals on the PE (-mean per row),
  then `(x - mean)^2` summed by one Scalar Engine `activation` (bias -mean,
  add-reduction), group totals on the PE; rstd = (var + eps) ** -0.5;
- with the affine weights folded into a per-row scale `s = rstd * w` and shift
  `t = b - mean * s`, the output is one Scalar Engine `activation(copy, scale=s, bias=t)`.

Weights and biases are one value per row (channel r % C): a column loaded once.
"""

from __future__ import annotations

from nkibot.lowering.emit import rowstats
from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Op
from nkibot.lowering.schedule import normstats
from nkibot.sim.cost.quick import SBUF_BYTES

ROW_BUDGET = SBUF_BYTES * 3 // 4  # bytes per partition: the row, a scratch row and the result row


#: positions of a BatchNorm row per chunk when the row is over the budget: 8 KiB fp32 a
#: partition per tile, small beside what a stage around it keeps live
BATCH_CHUNK = 2048


def fits(channels: int, groups: int, positions: int) -> bool:
    return fits_long(channels, groups, positions) and positions * 4 * 3 <= ROW_BUDGET


#: bytes per partition of a long row's (count, mean, M2) statistics, one a 512 positions
LONG_STATS_BUDGET = SBUF_BYTES // 4


def fits_long(channels: int, groups: int, positions: int) -> bool:
    """Rows (batch x channels) on the partitions, each row read twice in chunks of
    BATCH_CHUNK positions (`_emit_long_rows`): its statistics must fit, not the row."""
    chunks = -(-positions // rowstats.BN_STATS_FMAX)
    return channels <= PMAX and channels % groups == 0 and chunks * 24 <= LONG_STATS_BUDGET


def emit_groupnorm(kernel: Kernel, op: Op, x: str, params: list[str], out: Output) -> None:
    shape = op.shape
    n, c, groups = shape[0], shape[1], int(str(op.attr("groups")))
    hw = 1
    for d in shape[2:]:
        hw *= d
    cg, rows = c // groups, n * c
    per = min(c * max(1, PMAX // c), rows)
    eps, inv = float(str(op.attr("eps"))), 1.0 / (cg * hw)
    body = kernel.body
    body.comment(f"{op.origin}: GroupNorm, batch x channels on the partitions ({per} rows a "
                 f"tile), groups of {cg} rows")
    body.line(f"x_v = {x}.reshape(({rows}, {hw}))")
    body.line(f"out_v = {out.var}.reshape(({rows}, {hw}))")
    body.comment(f"block-diagonal ones: bd[p, q] = 1 when rows p and q share a group "
                 f"(q // {cg} by iota, transposed for p // {cg})")
    body.line(f"gq = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.iota(gq, [[1, {per // cg}], [0, {cg}]])")
    body.line(f"gp_ps = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.psum)")
    body.line("nisa.nc_transpose(gp_ps, gq)")
    body.line(f"bd = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line("nisa.tensor_tensor(dst=bd, data1=gp_ps, data2=gq, op=nl.equal)")
    cols = []
    for i, (p, what) in enumerate(zip(params, ("weight", "bias"), strict=False)):
        col = ("w_col", "b_col")[i]
        cols.append(col)
        body.comment(f"{what}: one value per row (channel r % {c}), loaded once")
        body.line(f"{col}_v = {p}.reshape(({c}, 1))")
        body.line(f"{col} = nl.ndarray(({per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        for r in range(0, per, c):
            body.line(f"nisa.dma_copy(dst={col}[{r}:{r + c}, 0:1], src={col}_v)")
    if hw * 4 * 3 > ROW_BUDGET:  # fits_long: a row too long to hold, read twice in chunks
        fn = _emit_long_rows(kernel, op, hw, eps, cols, out.dtype, cg)
    else:
        form = normstats.choose(row_forms(hw, len(cols)))
        fn = _emit_rows(kernel, op, hw, inv, eps, cols, out.dtype, cg, form)
    args = ", ".join(["x_v", "out_v", "bd", *cols])
    emit_grid(body, [Axis("r", rows, per)], f"{fn}({args}, {{r0}}, {{rsz}})", "affine_range")


def row_forms(hw: int, affine: int) -> dict[str, list[normstats.Step]]:
    """Each statistics form's instructions for one row tile (schedule/normstats)."""
    Step, cols = normstats.Step, normstats.column_steps
    out = [Step("scalar", hw), *cols("vector", 2 + affine), *cols("scalar", 1)]
    two = [Step("vector", hw), Step("scalar", hw), *cols("vector", 1)]
    return {"two_pass": two + out, "one_pass": normstats.one_pass_stats(hw) + out}


def _columns(body: Block, names: list[tuple[str, str]], c: int, per: int) -> None:
    """[per, 1] columns holding one value per row (channel r % c), each loaded once."""
    for col, tensor in names:
        body.line(f"{col}_v = {tensor}.reshape(({c}, 1))")
        body.line(f"{col} = nl.ndarray(({per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        for r in range(0, per, c):
            body.line(f"nisa.dma_copy(dst={col}[{r}:{r + c}, 0:1], src={col}_v)")


def emit_batchnorm(kernel: Kernel, op: Op, x: str, params: list[str], out: Output) -> None:
    """BatchNorm in eval mode: out = x * s + t per channel, s = w / sqrt(var + eps) and
    t = b - mean * s computed once as [R, 1] columns; one Scalar Engine `activation` a tile
    with rows (batch x channels) on the partitions."""
    shape = op.shape
    n, c = shape[0], shape[1]
    hw = 1
    for d in shape[2:]:
        hw *= d
    rows, per = n * c, min(c * max(1, PMAX // c), n * c)
    body = kernel.body
    body.comment(f"{op.origin}: BatchNorm (running statistics), batch x channels on the "
                 f"partitions ({per} rows a tile)")
    body.line(f"x_v = {x}.reshape(({rows}, {hw}))")
    body.line(f"out_v = {out.var}.reshape(({rows}, {hw}))")
    names = [("mean_col", params[0]), ("var_col", params[1])]
    if len(params) > 2:
        names += [("w_col", params[2]), ("b_col", params[3])]
    body.comment("per-row columns (channel r % C), loaded once")
    _columns(body, names, c, per)
    body.comment("scale = weight / sqrt(var + eps), shift = bias - mean * scale: once")
    body.line("scale = nl.ndarray((" f"{per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.tensor_scalar(dst=scale, data=var_col, op0=nl.add, "
              f"operand0={float(str(op.attr('eps')))!r})")
    body.line("nisa.activation(dst=scale, op=nl.rsqrt, data=scale)")
    if len(params) > 2:
        body.line("nisa.tensor_tensor(dst=scale, data1=scale, data2=w_col, op=nl.multiply)")
    body.line(f"neg_mean = nl.ndarray(({per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    body.line("nisa.tensor_scalar(dst=neg_mean, data=mean_col, op0=nl.multiply, "
              "operand0=-1.0)")
    _emit_shift(body, per, len(params) > 2)
    _normalise_rows(kernel, op, hw, out.dtype, rows, per)


TRIPLES_BUDGET = SBUF_BYTES // 8  # bytes per partition: each row tile's (count, mean, M2)
RESIDENT_BUDGET = SBUF_BYTES * 7 // 8  # a resident input, two output rows and the triples


def batch_tiles(n: int, c: int) -> tuple[int, int]:
    """(rows a tile, tiles) for batch statistics: whole batch elements, every tile full (so
    every partition of a channel sees the same count)."""
    k = max(d for d in range(1, max(1, PMAX // c) + 1) if n % d == 0)
    return k * c, n // k


def fits_batch_stats(n: int, c: int, positions: int) -> bool:
    return fits(c, 1, positions) and batch_tiles(n, c)[1] * 12 <= TRIPLES_BUDGET


def emit_batchnorm_train(kernel: Kernel, op: Op, x: str, params: list[str],
                         out: Output) -> None:
    """BatchNorm with batch statistics (training form): mean and variance per channel over
    N, H, W, then out = x * s + t as in eval mode.

    Rows (batch x channels) on the partitions as in eval mode, every tile the same whole
    batch elements, so row r of every tile is channel r % C. Pass 1, per tile: each row's
    mean and variance from bn_stats/bn_aggr (one Vector Engine pass), kept as a (count,
    mean, M2) triple in a [R, tiles, 3] SBUF tile; one bn_aggr over it gives each
    partition's statistics over all tiles, and Chan's combination over the partitions of
    a channel (a matmul against the [R, R] same-channel indicator) the channel's. Pass 2
    reloads each tile for one Scalar Engine `activation(copy, scale, bias)`.
    """
    shape = op.shape
    n, c = shape[0], shape[1]
    hw = 1
    for d in shape[2:]:
        hw *= d
    per, tiles = batch_tiles(n, c)
    rows, k = n * c, per // c
    eps = float(str(op.attr("eps")))
    body = kernel.body
    body.comment(f"{op.origin}: BatchNorm (batch statistics), batch x channels on the "
                 f"partitions ({per} rows a tile, {tiles} tiles)")
    body.line(f"x_v = {x}.reshape(({rows}, {hw}))")
    body.line(f"out_v = {out.var}.reshape(({rows}, {hw}))")
    body.comment(f"same-channel indicator: sc[p, q] = 1 when p % {c} == q % {c} (iota, "
                 "transposed on the PE, compared)")
    body.line(f"gq = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.iota(gq, [[0, {k}], [1, {c}]])")
    body.line(f"gp_ps = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.psum)")
    body.line("nisa.nc_transpose(gp_ps, gq)")
    body.line(f"sc = nl.ndarray(({per}, {per}), dtype=nl.float32, buffer=nl.sbuf)")
    body.line("nisa.tensor_tensor(dst=sc, data1=gp_ps, data2=gq, op=nl.equal)")
    if params:
        body.comment("per-row columns (channel r % C), loaded once")
        _columns(body, list(zip(("w_col", "b_col"), params, strict=False)), c, per)
    body.comment(f"pass 1: each tile's rows as (count, mean, M2) triples; counts are {hw}")
    body.line(f"trip = nl.ndarray(({per}, {tiles}, 3), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.memset(dst=trip, value={float(hw)!r})")
    resident = (tiles + 2) * hw * 4 + tiles * 12 <= RESIDENT_BUDGET
    if resident:
        body.comment(f"the whole input stays in SBUF ({tiles * hw * 4} bytes a partition): "
                     "read once")
        body.line(f"xs = nl.ndarray(({per}, {tiles}, {hw}), dtype=nl.float32, buffer=nl.sbuf)")
    stats_fn = kernel.names.fresh("batchnorm_stats")
    blk = Block(depth=1)
    tile = f"xs[0:{per}, t, 0:{hw}]" if resident else "xt"
    if not resident:
        blk.line(f"xt = nl.ndarray(({per}, {hw}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"nisa.dma_copy(dst={tile}, src=x_v[nl.ds(t * {per}, {per}), 0:{hw}])")
    blk.line(f"xv = {tile}")
    rowstats.emit_row_moments(blk, "xv", str(per), hw)
    blk.line(f"nisa.tensor_copy(dst=trip[0:{per}, t, 1:2], src=mv[0:{per}, 0:1])")
    blk.line(f"nisa.tensor_scalar(dst=trip[0:{per}, t, 2:3], data=mv[0:{per}, 1:2], "
             f"op0=nl.multiply, operand0={float(hw)!r})")
    src = "xs" if resident else "x_v"
    kernel.helpers.append([f"def {stats_fn}({src}, x_v, trip, t):" if resident else
                           f"def {stats_fn}(x_v, trip, t):",
                           f'    """{op.origin}: row tile t\'s statistics into trip[:, t]."""',
                           *blk.lines])
    body.line(f"for t in nl.affine_range({tiles}):")
    body.line(f"    {stats_fn}({'xs, ' if resident else ''}x_v, trip, t)")
    body.comment("each partition over every tile (bn_aggr), then each channel over its "
                 f"{k} partitions (Chan's combination on the PE)")
    body.line(f"mv_all = nl.ndarray(({per}, 2), dtype=nl.float32, buffer=nl.sbuf)")
    body.line("nisa.bn_aggr(dst=mv_all, data=trip)")
    rowstats.emit_combine(body, "mv_all", str(per), "sc", k)
    body.comment("scale = weight / sqrt(var + eps), shift = bias - mean * scale")
    body.line(f"scale = nl.ndarray(({per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    body.line(f"nisa.tensor_scalar(dst=scale, data=var, op0=nl.multiply, operand0={1.0 / k!r}, "
              f"op1=nl.add, operand1={eps!r})")
    body.line("nisa.activation(dst=scale, op=nl.rsqrt, data=scale)")
    if params:
        body.line("nisa.tensor_tensor(dst=scale, data1=scale, data2=w_col, op=nl.multiply)")
    _emit_shift(body, per, len(params) > 1)
    body.comment("pass 2: out = x * scale + shift, one Scalar Engine pass a tile")
    if not resident:
        _normalise_rows(kernel, op, hw, out.dtype, rows, per)
        return
    fn = kernel.names.fresh("batchnorm_rows")
    blk = Block(depth=1)
    blk.line(f"y = nl.ndarray(({per}, {hw}), dtype={nl_dtype(out.dtype)}, buffer=nl.sbuf)")
    blk.line(f"nisa.activation(dst=y, op=nl.copy, data=xs[0:{per}, t, 0:{hw}], scale=scale, "
             "bias=shift)")
    blk.line(f"nisa.dma_copy(dst=out_v[nl.ds(t * {per}, {per}), 0:{hw}], src=y)")
    kernel.helpers.append([f"def {fn}(xs, out_v, scale, shift, t):",
                           f'    """{op.origin}: resident row tile t."""', *blk.lines])
    body.line(f"for t in nl.affine_range({tiles}):")
    body.line(f"    {fn}(xs, out_v, scale, shift, t)")


def _emit_shift(body: Block, per: int, has_bias: bool) -> None:
    """shift = bias - mean * scale (or -mean * scale without a bias), from the [per, 1]
    columns neg_mean, scale and b_col: one instruction, shared by both BatchNorm forms."""
    body.line(f"shift = nl.ndarray(({per}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    if has_bias:
        body.line("nisa.scalar_tensor_tensor(dst=shift, data=neg_mean, op0=nl.multiply, "
                  "operand0=scale, op1=nl.add, operand1=b_col)")
    else:
        body.line("nisa.tensor_tensor(dst=shift, data1=neg_mean, data2=scale, op=nl.multiply)")


def _normalise_rows(kernel: Kernel, op: Op, hw: int, out_dtype: str, rows: int,
                    per: int) -> None:
    """The grid over row tiles of `per` rows: each x * scale + shift, one Scalar Engine pass;
    a row over the budget (`fits`) runs in chunks of BATCH_CHUNK positions (independent
    x * s + t); a row that fits loads whole."""
    fn = kernel.names.fresh("batchnorm_rows")
    whole = fits(1, 1, hw)
    size, cols = (str(hw), f"0:{hw}") if whole else ("hsz", "nl.ds(h0, hsz)")
    blk = Block(depth=1)
    blk.line(f"xt = nl.ndarray((p, {size}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"nisa.dma_copy(dst=xt, src=x_v[nl.ds(r0, p), {cols}])")
    blk.comment("out = x * scale + shift, on the Scalar Engine")
    blk.line(f"y = nl.ndarray((p, {size}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    blk.line("nisa.activation(dst=y, op=nl.copy, data=xt, scale=scale[0:p, 0:1], "
             "bias=shift[0:p, 0:1])")
    blk.line(f"nisa.dma_copy(dst=out_v[nl.ds(r0, p), {cols}], src=y)")
    if whole:
        kernel.helpers.append([f"def {fn}(x_v, out_v, scale, shift, r0, p):",
                               f'    """{op.origin}: rows r0..r0+p, whole batch elements."""',
                               *blk.lines])
        emit_grid(kernel.body, [Axis("r", rows, per)],
                  f"{fn}(x_v, out_v, scale, shift, {{r0}}, {{rsz}})", "affine_range")
        return
    kernel.helpers.append([f"def {fn}(x_v, out_v, scale, shift, r0, p, h0, hsz):",
                           f'    """{op.origin}: rows r0..r0+p, positions h0..h0+hsz."""',
                           *blk.lines])
    emit_grid(kernel.body, [Axis("r", rows, per), Axis("h", hw, BATCH_CHUNK)],
              f"{fn}(x_v, out_v, scale, shift, {{r0}}, {{rsz}}, {{h0}}, {{hsz}})", "affine_range")


def _emit_rows(kernel: Kernel, op: Op, hw: int, inv: float, eps: float, cols: list[str],
               out_dtype: str, cg: int, form: str) -> str:
    fn = kernel.names.fresh("groupnorm_rows")
    blk = Block(depth=1)
    blk.line(f"xt = nl.ndarray((p, {hw}), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"nisa.dma_copy(dst=xt, src=x_v[nl.ds(r0, p), 0:{hw}])")
    if form == "two_pass":
        blk.comment("mean: row sums (Vector Engine), group totals broadcast back (PE)")
        blk.line("rs = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.tensor_reduce(dst=rs, op=nl.add, data=xt, axis=1)")
        blk.line("tot = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.psum)")
        blk.line("nisa.nc_matmul(tot, bd[0:p, 0:p], rs)")
        blk.line("neg_mean = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.tensor_scalar(dst=neg_mean, data=tot, op0=nl.multiply, operand0={-inv!r})")
        blk.comment("centred variance: (x - mean)^2 summed by the Scalar Engine, group totals (PE)")
        blk.line(f"sq = nl.ndarray((p, {hw}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("ss = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=sq, op=nl.square, data=xt, bias=neg_mean, reduce_op=nl.add, "
                 "reduce_res=ss)")
        blk.line("var = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.psum)")
        blk.line("nisa.nc_matmul(var, bd[0:p, 0:p], ss)")
    else:
        rowstats.emit_group_moments(blk, "xt", "p", hw, "bd", cg)
        inv = 1.0 / cg
    _emit_scale_shift(blk, inv, eps, cols)
    blk.comment("out = x * scale + shift, on the Scalar Engine")
    blk.line(f"y = nl.ndarray((p, {hw}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
    blk.line("nisa.activation(dst=y, op=nl.copy, data=xt, scale=scale, bias=shift)")
    blk.line(f"nisa.dma_copy(dst=out_v[nl.ds(r0, p), 0:{hw}], src=y)")
    head = ", ".join(["x_v", "out_v", "bd", *cols])
    kernel.helpers.append([f"def {fn}({head}, r0, p):",
                           f'    """{op.origin}: rows r0..r0+p, whole batch elements."""',
                           *blk.lines])
    return fn


def _emit_scale_shift(blk: Block, inv: float, eps: float, cols: list[str]) -> None:
    """Lines leaving the per-row `scale` = w * (var * inv + eps) ** -0.5 and `shift` = b +
    neg_mean * scale ([p, 1] each) from the group statistics `var` and `neg_mean` and the
    affine columns `cols` (weight, then bias; either may be absent): both row forms."""
    blk.line("scale = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line(f"nisa.tensor_scalar(dst=scale, data=var, op0=nl.multiply, operand0={inv!r}, "
             f"op1=nl.add, operand1={eps!r})")
    blk.line("nisa.activation(dst=scale, op=nl.rsqrt, data=scale)")
    if cols:
        blk.comment("affine weight folded into the per-row scale")
        blk.line(f"nisa.tensor_tensor(dst=scale, data1=scale, data2={cols[0]}[0:p, 0:1], "
                 "op=nl.multiply)")
    blk.comment("shift = bias - mean * scale")
    blk.line("shift = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)")
    if len(cols) > 1:
        blk.line("nisa.scalar_tensor_tensor(dst=shift, data=neg_mean, op0=nl.multiply, "
                 f"operand0=scale, op1=nl.add, operand1={cols[1]}[0:p, 0:1])")
    else:
        blk.line("nisa.tensor_tensor(dst=shift, data1=neg_mean, data2=scale, op=nl.multiply)")


def _emit_long_rows(kernel: Kernel, op: Op, hw: int, eps: float, cols: list[str],
                    out_dtype: str, cg: int) -> str:
    """Rows too long to hold in SBUF (KernelBench level 2 21: 4 channels a group of 254 x
    254 positions): each row tile is read twice, BATCH_CHUNK positions at a time. Pass 1
    keeps every chunk's bn_stats triples (one Vector Engine pass), one bn_aggr gives each
    row's mean and variance, Chan's combination on the PE the group's; pass 2 reloads each
    chunk for one Scalar Engine `activation(copy, scale, bias)` and stores it. Two reads and
    one write of the tensor, where the rows written out as reductions took four stages of
    full passes through HBM scratch."""
    fn = kernel.names.fresh("groupnorm_long_rows")
    fmax, chunk = rowstats.BN_STATS_FMAX, BATCH_CHUNK
    full, tail = divmod(hw, chunk)
    per_chunk = chunk // fmax
    blk = Block(depth=1)
    blk.comment(f"pass 1: bn_stats of every {fmax} positions, {chunk} positions a load")
    blk.line(f"stats = nl.ndarray((p, {-(-hw // fmax)}, 6), dtype=nl.float32, buffer=nl.sbuf)")

    def load(start: str, size: int) -> None:
        blk.line(f"xt = nl.ndarray((p, {size}), dtype=nl.float32, buffer=nl.sbuf)")
        blk.line(f"nisa.dma_copy(dst=xt, src=x_v[nl.ds(r0, p), nl.ds({start}, {size})])")

    if full:
        blk.line(f"for h in nl.affine_range({full}):")
        blk.indent()
        load(f"h * {chunk}", chunk)
        for k in range(per_chunk):
            blk.line(f"nisa.bn_stats(dst=stats[0:p, h * {per_chunk} + {k}, 0:6], "
                     f"data=xt[0:p, {k * fmax}:{(k + 1) * fmax}])")
        blk.dedent()
    if tail:
        load(str(full * chunk), tail)
        for k in range(-(-tail // fmax)):
            hi = min(tail, (k + 1) * fmax)
            blk.line(f"nisa.bn_stats(dst=stats[0:p, {full * per_chunk + k}, 0:6], "
                     f"data=xt[0:p, {k * fmax}:{hi}])")
    blk.line("mv = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.sbuf)")
    blk.line("nisa.bn_aggr(dst=mv, data=stats)")
    rowstats.emit_combine(blk, "mv", "p", "bd", cg)
    _emit_scale_shift(blk, 1.0 / cg, eps, cols)
    blk.comment("pass 2: out = x * scale + shift, on the Scalar Engine, chunk by chunk")

    def normalise(start: str, size: int) -> None:
        load(start, size)
        blk.line(f"y = nl.ndarray((p, {size}), dtype={nl_dtype(out_dtype)}, buffer=nl.sbuf)")
        blk.line("nisa.activation(dst=y, op=nl.copy, data=xt, scale=scale, bias=shift)")
        blk.line(f"nisa.dma_copy(dst=out_v[nl.ds(r0, p), nl.ds({start}, {size})], src=y)")

    if full:
        blk.line(f"for h in nl.affine_range({full}):")
        blk.indent()
        normalise(f"h * {chunk}", chunk)
        blk.dedent()
    if tail:
        normalise(str(full * chunk), tail)
    head = ", ".join(["x_v", "out_v", "bd", *cols])
    kernel.helpers.append([f"def {fn}({head}, r0, p):",
                           f'    """{op.origin}: rows r0..r0+p, whole batch elements, in '
                           f'chunks of {chunk} positions."""', *blk.lines])
    return fn
