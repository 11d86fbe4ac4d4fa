"""Which band of output rows a convolution stacks on the stationary columns, and how many
torch groups it stacks a matmul (`emit/conv/convband.py` emits them; its docstring shows
the banded weight matrix). Pure: modelled times from the cost model's closed forms.
"""

from __future__ import annotations

import itertools
import math

from nkibot.lowering.schedule import convfold, phasefold
from nkibot.lowering.schedule.convfold import DESCRIPTOR_NS, QUEUES, Fold, planes
from nkibot.lowering.schedule.convspec import PLANE_BUDGET, ConvSpec, check, out_tiles
from nkibot.lowering.schedule.tiling import PMAX


def score(spec: ConvSpec, fold: Fold, elem_bytes: int) -> tuple[float, float, float]:
    """(modelled ns, its PE ns, its DMA ns) per batch element and group, by the cost model's
    constants (trn1): the Tensor Engine's matmuls x max(N, 64) cycles over the output
    positions (a band's ragged last group computes all its rows) plus the DMA queues'
    time for the plane copies and the output (bytes at 16 x 17 B/ns plus 15 ns a
    contiguous run; a band's output runs are rows of the dims inside it). Summed: by the
    cost model a batch element's loads and stores overlap its matmuls only in part."""
    outs = [-(-d.size_out // fold.rows) if j == fold.band else d.size_out
            for j, d in enumerate(spec.dims)]
    cols = -(-spec.cout_g * fold.rows // PMAX)
    pe = convfold.pe_ns(math.prod(fold.outer) * cols * max(math.prod(outs), 64), elem_bytes)
    copies = fold.blocks * spec.cin_g * math.prod(d.size_in for d in spec.dims) * elem_bytes
    out = spec.cout_g * math.prod(d.size_out for d in spec.dims) * elem_bytes
    if fold.rows > 1:
        run = math.prod(d.size_out for d in spec.dims[fold.band + 1:])
    else:
        run = 1
        for d, t in zip(reversed(spec.dims), reversed(out_tiles(spec)), strict=True):
            run *= t
            if t < d.size_out:
                break
    runs = copies / (spec.dims[-1].size_in * elem_bytes) + out / (run * elem_bytes)
    dma = convfold.load_ns(copies + out) + runs * DESCRIPTOR_NS / QUEUES
    return pe + dma, pe, dma


def choose(spec: ConvSpec, best: Fold, elem_bytes: int, room: int) -> Fold:
    """The band (dim, R rows, A blocks, whole folds of the other dims) of least `score`
    when it beats the plain fold `best`'s, its plane and weights within `room` elements
    per partition; else `best`. A band is for PE time: one that does not cut it (fewer
    blocks, so fewer plane copies, but more matmuls) or whose DMA time would exceed it is
    not taken (KernelBench 57 and 71, 2-D with 64 and 32 channels: the modelled kernel, DMA
    bound, got slower). Only stride-1, undilated dims band."""
    if spec.cout_g * 2 > PMAX or any(d.up > 1 for d in spec.dims):
        return best
    taps = tuple(d.taps for d in spec.dims)
    least, plain_pe, _ = score(spec, best, elem_bytes)
    found = best
    for i, d in enumerate(spec.dims):
        if d.step != 1 or d.dil != 1 or d.size_out < 2:
            continue
        others = [[f for f in range(1, k + 1) if k % f == 0] if j != i else [1]
                  for j, k in enumerate(taps)]
        for sizes in itertools.product(*others):
            fixed = spec.cin_g * math.prod(sizes)
            for rows in range(2, min(PMAX // spec.cout_g, d.size_out) + 1):
                for a in range(1, min(PMAX // fixed, d.taps + rows - 1) + 1):
                    fold = Fold(tuple(a if j == i else f for j, f in enumerate(sizes)),
                                taps, i, rows)
                    cost, pe, dma = score(spec, fold, elem_bytes)
                    if cost < least and dma <= pe < plain_pe and _fits(spec, fold, room):
                        found, least = fold, cost
    return found


def stack(spec: ConvSpec, elem_bytes: int, phased: bool) -> ConvSpec:
    """`spec` with S torch groups stacked a group: the S (dividing groups, S * cin_g and S *
    cout_g within 128) of least modelled time over all groups, by the form's own chooser
    (by phase: phasefold.fold_cost; else the fold and band of least `score`). Stacking
    multiplies the PE array's useful rows and columns by S at the same matmul count per
    group, but leaves fewer rows to fold taps on."""

    best, least = spec, math.inf
    for s in range(1, spec.groups + 1):
        if spec.groups % s or s * max(spec.cin_g, spec.cout_g) > PMAX:
            continue
        cand = ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups // s, spec.dims,
                        spec.transposed, s)
        if phased:
            dims = phasefold.phase_dims(cand)
            if dims is None:
                continue
            cost = phasefold.fold_cost(cand, dims, elem_bytes)[0]
        else:
            if check(cand, "float32") is not None:
                continue
            fold = choose(cand, convfold.choose(cand, elem_bytes), elem_bytes,
                          PLANE_BUDGET // 4)
            cost = score(cand, fold, elem_bytes)[0]
        if cost * cand.groups < least:
            best, least = cand, cost * cand.groups
    return best


def _fits(spec: ConvSpec, fold: Fold, room: int) -> bool:
    weights = spec.cout_g * fold.rows * math.prod(fold.outer)
    return math.prod(planes(spec, fold)) + weights <= room
