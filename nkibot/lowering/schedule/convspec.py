"""A convolution as the lowering plans it: its spatial dims, groups and channels
(`ConvSpec`), the output tile per dim, and whether its input plane fits SBUF whole or runs
in slabs of output rows. Pure: the convolution emitters (`emit/conv/`) and the choosers
(`convfold`, `bandfold`, `phasefold`) read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nkibot.lowering.frontend.ir import Op
from nkibot.lowering.schedule.layout import LayoutError
from nkibot.lowering.schedule.tiling import PMAX
from nkibot.sim.cost.quick import SBUF_BYTES

NMAX = 512  # gemm_moving_fmax: output positions per matmul (one fp32 PSUM bank)


PLANE_BUDGET = SBUF_BYTES * 5 // 8  # bytes per partition for the resident input plane and weights


# output rows per band of a plane over the budget (whole tiles; at least one): a band's
# tiles wait for all its loads, and by the cost model bands of 8 rows beat bigger ones
# (KernelBench 54: 0.207 at 8 rows, 0.149 at 26; model estimate trn1)
BAND_ROWS = 8
#: ... when each block loads only the rows it reads (`convslab.flat`): no halo to amortise,
#: and longer runs a DMA (level 2 54: 0.506 at 8 rows, 0.510 at 16, 0.511 at 32)
FLAT_BAND_ROWS = 32


@dataclass(frozen=True)
class Dim:
    """One spatial dim: input/output extent, taps, and where input element i lands."""

    size_in: int
    size_out: int
    taps: int
    step: int  # window stride in the padded plane (the conv stride; 1 when transposed)
    dil: int
    up: int  # input element i lands at i * up + lead (up = stride when transposed)
    lead: int

    @property
    def plane(self) -> int:
        """Length of the padded (and zero-inserted) plane the windows read."""
        return (self.size_out - 1) * self.step + (self.taps - 1) * self.dil + 1

    def placed(self) -> tuple[int, int, int]:
        """(first input index, count, first plane index) of the input that lands in the plane."""
        lo = max(0, -(self.lead // self.up) if self.lead < 0 else 0)
        while lo * self.up + self.lead < 0:
            lo += 1
        hi = min(self.size_in, (self.plane - 1 - self.lead) // self.up + 1)
        return lo, max(hi - lo, 0), lo * self.up + self.lead


@dataclass(frozen=True)
class ConvSpec:
    batch: int
    cin: int
    cout: int
    groups: int
    dims: tuple[Dim, ...]
    transposed: bool
    # torch groups stacked in one group here (block-diagonal weights: bandfold.stack)
    stack: int = 1

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def taps(self) -> int:
        return math.prod(d.taps for d in self.dims)


def _ints(value: object, n: int) -> tuple[int, ...]:
    items = value if isinstance(value, tuple | list) else (value,) * n
    return tuple(int(str(v)) for v in items)


def conv_spec(op: Op, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> ConvSpec:
    n = len(x_shape) - 2
    stride, pad = _ints(op.attr("stride", 1), n), _ints(op.attr("padding", 0), n)
    dil, groups = _ints(op.attr("dilation", 1), n), int(str(op.attr("groups", 1)))
    transposed = bool(op.attr("transposed", False))
    taps = w_shape[2:]
    dims = []
    for i in range(n):
        if transposed:
            dims.append(Dim(x_shape[2 + i], op.shape[2 + i], taps[i], 1, dil[i], stride[i],
                            dil[i] * (taps[i] - 1) - pad[i]))
        else:
            dims.append(Dim(x_shape[2 + i], op.shape[2 + i], taps[i], stride[i], dil[i], 1,
                            pad[i]))
    return ConvSpec(x_shape[0], x_shape[1], op.shape[1], groups, tuple(dims), transposed)


def out_tiles(spec: ConvSpec) -> tuple[int, ...]:
    """Output-position tile per spatial dim: innermost first, up to 512 positions."""
    sizes: list[int] = []
    room = NMAX
    for d in reversed(spec.dims):
        t = max(1, min(d.size_out, room))
        sizes.insert(0, t)
        room = room // t if t == d.size_out else 1
    return tuple(sizes)


#: A tile that spans PSUM banks: (the dim split between them, its rows per bank, banks).
Banks = tuple[int, int, int]

#: PSUM banks a plain conv tile spans at most (of 8 a partition: two tiles in flight).
#: Level 2 at 2 banks against 4 (model estimate trn1): 42 against 44 tasks at >= 0.5 of the
#: roofline, the same median; 57 alone lost (0.496 -> 0.479), 1, 31, 71 and 73 gained.
TILE_BANKS = 4


def bank_split(spec: ConvSpec, most: int = TILE_BANKS) -> Banks | None:
    """Where a plain tile should span PSUM banks (up to `most`), else None.

    A tile is one matmul's output (<= 512 positions, one bank); its eviction, tail ops and
    store each pay a fixed cost (an instruction's access overhead, a DMA's ~1.3 us latency)
    that a 504-position tile barely amortises: level 2 57 (Conv2d 8 -> 64, 126 x 126 out)
    spent 1,667 us where its DMA queues were busy 1,336 (model estimate trn1). n banks a
    tile (n matmuls, one eviction each, the rest once) divide those costs by n. The split dim
    is the one a tile covers in part (`out_tiles` fills the inner dims whole first); none
    when a tile already covers the whole output."""
    tiles = out_tiles(spec)
    partial = [k for k, (t, d) in enumerate(zip(tiles, spec.dims, strict=True))
               if t < d.size_out]
    if not partial:
        return None
    k = partial[-1]
    return k, tiles[k], min(most, -(-spec.dims[k].size_out // tiles[k]))


def tile_sizes(spec: ConvSpec, banks: Banks | None) -> tuple[int, ...]:
    """`out_tiles`, the split dim times the banks a tile spans."""
    tiles = out_tiles(spec)
    if banks is None:
        return tiles
    k, rows, n = banks
    return (*tiles[:k], min(n * rows, spec.dims[k].size_out), *tiles[k + 1:])


def check(spec: ConvSpec, dtype: str, band_rows: int = BAND_ROWS
          ) -> tuple[tuple[int, int], ...] | None:
    """None when the whole plane fits SBUF, else the slabs: per banded leading dim, (output
    rows per band, per tile). One banded dim when a band of dim 0 with the full extent of the
    others fits; else two, a band of rows of dim 1 too (a 3-D conv with large H x W planes)."""
    if spec.cin_g > PMAX:
        raise LayoutError(f"convolution with {spec.cin_g} input channels per group (the "
                          f"contraction is tiled up to {PMAX})")
    room = plane_room(spec)
    plane = math.prod(d.plane for d in spec.dims)
    if plane <= room:
        return None
    # slab mode: bands of whole output tiles of the first spatial dim (their halo included)
    t0 = out_tiles(spec)[0]
    d0, rest = spec.dims[0], math.prod(d.plane for d in spec.dims[1:])
    while t0 > 1 and slab_rows(d0, t0) * rest > room:
        t0 = max(1, t0 // 2)
    if slab_rows(d0, t0) * rest > room:
        if len(spec.dims) > 1:
            return (1, 1), _second_band(spec, room)
        raise LayoutError(f"convolution plane of {plane} elements per partition exceeds the "
                          f"SBUF budget ({PLANE_BUDGET // 1024} KiB) even one output row at a "
                          "time")
    rows = t0
    while rows + t0 <= min(d0.size_out, band_rows) and slab_rows(d0, rows + t0) * rest <= room:
        rows += t0
    return ((rows, t0),)


def plane_room(spec: ConvSpec) -> int:
    """Elements per partition the input plane (or a slab of it) may take beside the
    resident weights (fp32 words of PLANE_BUDGET)."""
    return PLANE_BUDGET // 4 - spec.cout_g * spec.taps


def _second_band(spec: ConvSpec, room: int) -> tuple[int, int]:
    """(output rows per band, per tile) of dim 1 under bands of one output row of dim 0:
    whole tiles, in the fewest bands that fit, of equal rows (fewer bands, fewer calls and
    halo loads)."""
    d0, d1 = spec.dims[0], spec.dims[1]
    rest = slab_rows(d0, 1) * math.prod(d.plane for d in spec.dims[2:])
    t1 = out_tiles(spec)[1]
    while t1 > 1 and slab_rows(d1, t1) * rest > room:
        t1 = max(1, t1 // 2)
    if slab_rows(d1, t1) * rest > room:
        raise LayoutError(f"convolution plane of {math.prod(d.plane for d in spec.dims)} "
                          f"elements per partition exceeds the SBUF budget "
                          f"({PLANE_BUDGET // 1024} KiB) even one output row of its first two "
                          "dims at a time")
    rows = t1
    while rows + t1 <= d1.size_out and slab_rows(d1, rows + t1) * rest <= room:
        rows += t1
    bands = -(-d1.size_out // rows)
    return -(-d1.size_out // bands // t1) * t1, t1


def slab_rows(d: Dim, rows: int) -> int:
    """Plane rows that `rows` output rows read."""
    return (rows - 1) * d.step + (d.taps - 1) * d.dil + 1
