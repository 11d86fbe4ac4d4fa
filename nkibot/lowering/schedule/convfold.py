"""Kernel taps stacked on the partitions: which taps share one matmul, and their loads.

The Tensor Engine costs the same per matmul whatever its contraction rows (up to 128): with
few input channels (3 in KernelBench 50) most of the array idles. A `Fold` stacks a block
of f_0 x f_1 x ... taps on the partitions: partition block u = (u_0, u_1, ...) holds the
input plane shifted left by u_i * dilation along each dim, and the weights of tap
j_i * f_i + u_i, so one matmul at base tap j contracts cin * prod(f) rows. A dim whose
taps do not divide by f_i leaves the blocks past its last tap with zero weights.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from nkibot.lowering.schedule.convspec import ConvSpec, Dim
from nkibot.lowering.schedule.tiling import PMAX
from nkibot.sim.cost import constants as C

# The cost model's figures (trn1 by default), from the module that loads no simulator:
# Tensor Engine ns of bf16 cycles (fp32 4x), and ns to move bytes over all DMA queues.
from nkibot.sim.cost.quick import load_ns as load_ns  # re-exported: conv* call convfold.load_ns
from nkibot.sim.cost.quick import pass_ns
from nkibot.sim.cost.quick import pe_ns as pe_ns


@dataclass(frozen=True)
class Fold:
    """f_i taps of each dim i stacked on the partitions (all 1: no fold); with `rows` > 1,
    also `rows` output rows of dim `band` stacked on the stationary columns (convband.py):
    block u_band then holds the plane shifted by u_band rows and base tap j of that dim
    shifts the window by j * f rows."""

    sizes: tuple[int, ...]
    taps: tuple[int, ...]
    band: int = -1
    rows: int = 1

    @property
    def blocks(self) -> int:
        return math.prod(self.sizes)

    @property
    def outer(self) -> tuple[int, ...]:
        """Matmuls per dim: base taps 0, f_i, 2 f_i, ... (the banded dim: base shifts 0, f,
        2 f, ... until every one of its `rows` output rows has met all its taps)."""
        return tuple(-(-(k + (self.rows - 1 if i == self.band else 0)) // f)
                     for i, (k, f) in enumerate(zip(self.taps, self.sizes, strict=True)))

    def ragged(self, i: int) -> bool:
        """Dim i's last base tap contracts only a prefix of the blocks."""
        return i != self.band and self.taps[i] % self.sizes[i] != 0

    def offsets(self) -> list[tuple[int, ...]]:
        """Each partition block's tap offset u, in block order."""
        return list(itertools.product(*(range(f) for f in self.sizes)))


def choose(spec: ConvSpec, elem_bytes: int) -> Fold:
    """The fold of least modelled Tensor Engine plus plane-load time (`_score`) within 128
    rows; on a tie, the one folding outer dims (whole contiguous rows per copy).

    A zero-inserted plane (transposed, stride > 1) is placed block by block by a zeroing
    and a strided GpSimd copy (`_score` counts both): few input channels and many taps
    (KernelBench level 2 78: 8 channels, 125 taps) still fold.
    """
    taps = tuple(d.taps for d in spec.dims)
    fits = [Fold(f, taps) for f in itertools.product(*(range(1, k + 1) for k in taps))
            if spec.cin_g * math.prod(f) <= PMAX and _prefix(f, taps)]
    return min(fits, key=lambda f: (_score(spec, f, elem_bytes), [-s for s in f.sizes]))


def _prefix(sizes: tuple[int, ...], taps: tuple[int, ...]) -> bool:
    """At most one dim's taps do not divide by its fold, and it is the outermost folded
    one: then at its last base tap the blocks whose taps exist are a prefix of the
    partitions (block order runs that dim slowest), and that matmul contracts only them."""
    folded = [i for i, f in enumerate(sizes) if f > 1]
    ragged = [i for i in folded if taps[i] % sizes[i]]
    return not ragged or ragged == folded[:1]


def _score(spec: ConvSpec, fold: Fold, elem_bytes: int) -> float:
    """Nanoseconds per batch element and group, by the cost model's constants (trn1): each
    matmul max(N, 64) cycles at 2.8 GHz (fp32 4x), over every output position; each plane
    copy its bytes at 16 queues x 17 B/ns, once: the plane is a loop body's tile, which
    the cost model rotates through two buffers (constants.LOOP_BUFFERS), so a batch
    element's plane loads while the previous one's matmuls run. Counted twice (until
    2026-12-07), a fold of more blocks lost every tie it won on the model: level 2 1 (16
    channels, 3 x 3) took 3 blocks at 0.486 of the roofline where 6 give 0.529."""
    positions = math.prod(max(d.size_out, 1) for d in spec.dims)
    pe = pe_ns(math.prod(fold.outer) * -(-spec.cout_g // PMAX) * max(positions, 64),
               elem_bytes)
    plane = fold.blocks * spec.cin_g * math.prod(d.size_in for d in spec.dims) * elem_bytes
    scatter = 0.0
    if any(d.up > 1 for d in spec.dims):
        # each block: its plane zeroed, then its input copied to every up-th position
        per = math.prod(d.plane for d in spec.dims) + math.prod(d.size_in for d in spec.dims)
        scatter = fold.blocks * per * pass_ns("gpsimd", elem_bytes)
    return pe + load_ns(plane) + scatter


def shifted(placed: tuple[int, int, int], d: Dim, shift: int) -> tuple[int, int, int]:
    """(first input, count, plane start) of the input that lands in a plane shifted left by
    `shift` positions (the elements that would land before 0 are dropped)."""
    first, count, start = placed
    skip = max(0, -(-(shift - start) // d.up))
    return first + skip, count - skip, start + skip * d.up - shift


def block_slices(dims: tuple[Dim, ...], placed: list[tuple[int, int, int]],
                 u: tuple[int, ...]) -> tuple[list[str], list[str], list[str]] | None:
    """(plane slices, input slices, counts) of the block shifted by u taps, None when
    nothing lands."""
    here = [shifted(p, d, ui * d.dil) for p, d, ui in zip(placed, dims, u, strict=True)]
    if not all(c > 0 for _, c, _ in here):
        return None
    dst = [f"{st}:{st + (c - 1) * d.up + 1}" + (f":{d.up}" if d.up > 1 else "")
           for d, (_, c, st) in zip(dims, here, strict=True)]
    return dst, [f"{f}:{f + c}" for f, c, _ in here], [str(c) for _, c, _ in here]


def flat_shift(dims: tuple[Dim, ...], planes: list[int], placed: list[tuple[int, int, int]],
               u: tuple[int, ...]) -> int | None:
    """The element offset of block u in the flattened plane when the plane is the whole
    input, unpadded, and the block is that input shifted left by u taps: then one run per
    partition, input[off:] into plane[:P - off], places it (the positions it also fills,
    past each dim's shifted edge, hold the next row's values, and no existing tap reads
    them, as `margins` says of the same positions left unwritten). None otherwise."""
    if any(d.up > 1 or p != (0, d.size_in, 0) or q != d.size_in
           for d, p, q in zip(dims, placed, planes, strict=True)):
        return None
    off, inner = 0, 1
    for d, p, ui in reversed(list(zip(dims, placed, u, strict=True))):
        first, count, start = shifted(p, d, ui * d.dil)
        if count <= 0 or start != 0:
            return None
        off += first * inner
        inner *= d.size_in
    return off


def margins(dims: tuple[Dim, ...], planes: list[int], placed: list[tuple[int, int, int]],
            u: tuple[int, ...], band: int = -1, every: bool = False) -> list[list[str]]:
    """The plane regions block u's input does not cover and a window of an existing tap
    reads (padding), as slices per dim: each is zeroed, so no window reads an unwritten
    element. The last u * dilation positions of each dim, shifted out, are read by no
    existing tap (`_prefix`), except in the banded dim, whose zero weights read them (in
    every dim when `every`: phase blocks under zero weights, phasefold.PhaseBlocks)."""
    here = [shifted(p, d, ui * d.dil) for p, d, ui in zip(placed, dims, u, strict=True)]
    if not all(c > 0 for _, c, _ in here) or any(d.up > 1 for d in dims):
        return [[f"0:{p}" for p in planes]]
    out = []
    for i, ((_, c, st), p, d, ui) in enumerate(zip(here, planes, dims, u, strict=True)):
        whole = [f"0:{q}" for q in planes]
        for lo, hi in ((0, st), (st + c, p if every or i == band else p - ui * d.dil)):
            if hi > lo:
                out.append([*whole[:i], f"{lo}:{hi}", *whole[i + 1:]])
    return out


def grouped(spec: ConvSpec, fold: Fold) -> ConvSpec:
    """The spec whose banded dim counts output groups of `fold.rows` rows (the tiles'
    unit there)."""
    dims = tuple(Dim(d.size_in, -(-d.size_out // fold.rows), d.taps, d.step, d.dil, d.up,
                     d.lead) if i == fold.band else d for i, d in enumerate(spec.dims))
    return ConvSpec(spec.batch, spec.cin, spec.cout, spec.groups, dims, spec.transposed,
                    spec.stack)


DESCRIPTOR_NS = C.DMA_DESCRIPTOR_NS.value  # the cost model's per-run DMA cost


QUEUES = C.TRN1.dma_queues


def plane(d: Dim, fold: Fold, i: int) -> int:
    """Plane length of dim i as read: the banded dim reads up to row R * (groups - 1) +
    (J - 1) * A of each shifted block (zero past the input)."""
    if i != fold.band:
        return d.plane
    groups = -(-d.size_out // fold.rows)
    return max(d.plane, fold.rows * (groups - 1) + (fold.outer[i] - 1) * fold.sizes[i] + 1)


def planes(spec: ConvSpec, fold: Fold) -> list[int]:
    return [plane(d, fold, i) for i, d in enumerate(spec.dims)]
