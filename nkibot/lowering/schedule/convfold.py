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
from typing import TYPE_CHECKING

from nkibot.lowering.emit.builder import PMAX, Block

# The cost model's figures (trn1 by default), from the module that loads no simulator:
# Tensor Engine ns of bf16 cycles (fp32 4x), and ns to move bytes over all DMA queues.
from nkibot.sim.cost.quick import load_ns as load_ns  # re-exported: conv* call convfold.load_ns
from nkibot.sim.cost.quick import pe_ns as pe_ns

if TYPE_CHECKING:
    from nkibot.lowering.emit.conv.conv import ConvSpec, Dim


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

    Not for a zero-inserted plane (transposed, stride > 1): it is placed by a strided
    copy, and one copy per block costs more than the matmuls it saves.
    """
    taps = tuple(d.taps for d in spec.dims)
    if any(d.up > 1 for d in spec.dims):
        return Fold((1,) * len(taps), taps)
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
    copy its bytes at 16 queues x 17 B/ns, counted twice (a batch element's loads overlap
    the matmuls that wait for them only in part)."""
    positions = math.prod(max(d.size_out, 1) for d in spec.dims)
    pe = pe_ns(math.prod(fold.outer) * -(-spec.cout_g // PMAX) * max(positions, 64),
               elem_bytes)
    plane = fold.blocks * spec.cin_g * math.prod(d.size_in for d in spec.dims) * elem_bytes
    return pe + load_ns(2 * plane)


def emit_weights(body: Block, spec: ConvSpec, fold: Fold, compute: str) -> None:
    """w_sb[(block, cin), cout, J...]: partition block u, position j holds tap j * f + u
    (transposed: the flipped tap, at position J - 1 - j); positions past the kernel's edge
    stay unwritten and no matmul reads them."""
    rows, outer = spec.cin_g * fold.blocks, ", ".join(str(j) for j in fold.outer)
    cin, cout = spec.cin_g, spec.cout_g
    body.line(f"w_sb = nl.ndarray(({rows}, {cout * fold.rows}, {outer}), dtype={compute}, "
              "buffer=nl.sbuf)")
    if fold.blocks == 1 and fold.rows == 1 and spec.stack == 1:
        body.line("nisa.dma_copy(dst=w_sb, src=w_v[g])")
        return
    if fold.rows > 1:
        body.comment(f"columns r * {cout} + co: output row r of the band; the pairs (block, "
                     "row) no tap joins stay zero")
    zero_weights(body, spec, "w_sb", fold.rows > 1)
    for b, u in enumerate(fold.offsets()):
        for r in range(fold.rows):
            here = _tap_slices(spec, fold, u, r)
            if here is not None:
                weight_copy(body, spec, "w_sb", (b * cin, r * cout), here)


def zero_weights(body: Block, spec: ConvSpec, name: str, banded: bool = False) -> None:
    """Weights with entries no copy writes (a band's, stacked groups' off-diagonal blocks)
    start as zeros."""
    if spec.stack > 1:
        body.comment(f"{spec.stack} groups stacked on both sides: the blocks between "
                     "different groups stay zero")
    if spec.stack > 1 or banded:
        body.line(f"nisa.memset(dst={name}, value=0.0, engine=nisa.engine.gpsimd)")


def weight_copy(body: Block, spec: ConvSpec, name: str, at: tuple[int, int],
                here: tuple[list[str], list[str]]) -> None:
    """The weights of one partition block and column block: `name`[at[0].., at[1].., dst]
    from w_v[g, .., src]; with groups stacked, one copy per torch group onto its diagonal
    block."""
    (row, col), (dst, src) = at, here
    s = spec.stack
    ci, co = spec.cin_g // s, spec.cout_g // s
    for k in range(s):
        grp = f"g, {k}" if s > 1 else "g"
        body.line(f"nisa.dma_copy(dst={name}[{row + k * ci}:{row + (k + 1) * ci}, "
                  f"{col + k * co}:{col + (k + 1) * co}, {', '.join(dst)}], "
                  f"src=w_v[{grp}, 0:{ci}, 0:{co}, {', '.join(src)}])")


def _tap_slices(spec: ConvSpec, fold: Fold, u: tuple[int, ...], r: int
                ) -> tuple[list[str], list[str]] | None:
    """(weight positions, kernel taps) of partition block u for output row r of the band
    (None when no tap joins them). Position p of a dim holds tap p * f + u (transposed:
    the flipped tap at position J - 1 - p); in the banded dim, row r's tap there is
    p * f + u - r, zero where that is past the kernel's edge."""
    dst, src = [], []
    for i, (k, f, j, ui) in enumerate(zip(fold.taps, fold.sizes, fold.outer, u, strict=True)):
        if i == fold.band:
            base = k - 1 - (j - 1) * f - ui + r if spec.transposed else ui - r
            lo, hi = max(0, -(base // f)), min(j - 1, (k - 1 - base) // f)
            if hi < lo:
                return None
            n, first = hi - lo + 1, base + lo * f
            dst.append(f"{lo}:{hi + 1}")
            src.append(f"{first}:{first + f * (n - 1) + 1}" + (f":{f}" if n > 1 else ""))
            continue
        n = -(-(k - ui) // f)
        lo = k - 1 - ui - f * (n - 1) if spec.transposed else ui
        dst.append(f"{j - n}:{j}" if spec.transposed else f"0:{n}")
        src.append(f"{lo}:{lo + f * (n - 1) + 1}" + (f":{f}" if f > 1 and n > 1 else ""))
    return dst, src


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


def margins(dims: tuple[Dim, ...], planes: list[int], placed: list[tuple[int, int, int]],
            u: tuple[int, ...], band: int = -1) -> list[list[str]]:
    """The plane regions block u's input does not cover and a window of an existing tap
    reads (padding), as slices per dim: each is zeroed, so no window reads an unwritten
    element. The last u * dilation positions of each dim, shifted out, are read by no
    existing tap (`_prefix`), except in the banded dim, whose zero weights read them."""
    here = [shifted(p, d, ui * d.dil) for p, d, ui in zip(placed, dims, u, strict=True)]
    if not all(c > 0 for _, c, _ in here) or any(d.up > 1 for d in dims):
        return [[f"0:{p}" for p in planes]]
    out = []
    for i, ((_, c, st), p, d, ui) in enumerate(zip(here, planes, dims, u, strict=True)):
        whole = [f"0:{q}" for q in planes]
        for lo, hi in ((0, st), (st + c, p if i == band else p - ui * d.dil)):
            if hi > lo:
                out.append([*whole[:i], f"{lo}:{hi}", *whole[i + 1:]])
    return out
