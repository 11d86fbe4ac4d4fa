"""How a layout copy moves its elements, chosen by the cost model's closed-form figures.

A layout copy (`layoutcopy.emit_copy`) writes a contiguous destination from a strided view
of a source. Three mechanisms can do it, and which is fastest depends on the view:

- `dma`: one HBM -> HBM `dma_copy` through the view's access pattern. Free when the
  destination's innermost dim is contiguous in the source too (long runs); a transpose
  that way reads element-sized runs, one DMA descriptor each.
- `pe`: [<=128, <=128] blocks read with runs along the source's contiguous dim, turned on
  the Tensor Engine (`nc_transpose`), copied out of PSUM and stored with runs along the
  destination's. For transposes that cross the partition dim.
- `sbuf`: the destination's outermost dim stays on partitions and only the free dims are
  reordered: each partition's elements are loaded in the source's memory order (long
  runs), reordered by one Vector Engine `tensor_copy` reading an access pattern over the
  tile, and stored contiguously. Batched small transposes (AWS's transpose2d example:
  [128, 32 x 32] blocks) are one load, one copy and one store.

`dma_transpose` is not a candidate: it moves 2-byte dtypes only, and its hardware form
wants 16-partition sources (nki.isa.dma_transpose's docstring).

`plan` is pure: dims and dtype in, a `CopyPlan` out. Figures are model estimates for the
target (`nkibot.sim.cost.quick`), not measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nkibot.sim.cost import quick

PMAX = 128
#: below this many elements on either side of a transpose the PE round trip costs more
#: than the short runs it saves (one 128 x 128 block is a few hundred ns of DMA either way)
MIN_PE_SIDE = 16
#: bytes a partition holds of one `sbuf` tile (two tiles, double-buffered, stay under a
#: third of a trn1 partition)
SBUF_TILE_BYTES = quick.SBUF_BYTES // 12


@dataclass(frozen=True)
class CopyPlan:
    """The chosen mechanism, its modelled ns, and for `sbuf` the chunk of dims[1]."""

    how: str  # "dma" | "pe" | "sbuf"
    ns: float
    chunk: int = 0  # sbuf: elements of dims[1] per tile
    inner: int = -1  # pe: index of the dim contiguous in the source


def plan(dims: list[tuple[int, int]], elem_bytes: int, floating: bool,
         target: str = "trn1") -> CopyPlan:
    """The fastest mechanism for a copy of `dims` ((count, source stride) per destination
    dim, outermost first, destination contiguous) by the model's closed-form figures."""
    options = [CopyPlan("dma", dma_ns(dims, elem_bytes, target))]
    inner = pe_inner(dims)
    if inner is not None and floating:
        options.append(CopyPlan("pe", pe_ns(dims, inner, elem_bytes, target), inner=inner))
    chunk = sbuf_chunk(dims, elem_bytes)
    if chunk:
        options.append(CopyPlan("sbuf", sbuf_ns(dims, chunk, elem_bytes, target), chunk))
    return min(options, key=lambda p: p.ns)


def run_elems(dims: list[tuple[int, int]]) -> int:
    """Elements of the longest contiguous run in the source over the given dims."""
    run = 1
    for n, s in sorted(dims, key=lambda d: d[1]):
        if s != run:
            break
        run *= n
    return run


def dma_ns(dims: list[tuple[int, int]], b: int, target: str) -> float:
    """One HBM -> HBM transfer with the view's runs (its innermost dim's, if stride 1)."""
    total = math.prod(n for n, _ in dims) * b
    n_last, s_last = dims[-1]
    run = n_last * b if s_last == 1 else b
    return quick.dma_ns(total, run, PMAX, target)


def pe_inner(dims: list[tuple[int, int]]) -> int | None:
    """The dim contiguous in the source that a PE transpose would move innermost."""
    if len(dims) < 2 or dims[-1][1] == 1 or dims[-1][0] < MIN_PE_SIDE:
        return None
    return next((i for i, (n, s) in enumerate(dims[:-1]) if s == 1 and n >= MIN_PE_SIDE), None)


def pe_ns(dims: list[tuple[int, int]], inner: int, b: int, target: str) -> float:
    """Blocks of (destination's contiguous dim) x (source's) each loaded, transposed,
    evacuated and stored; the four steps of successive blocks overlap."""
    (n_a, _), (n_b, _) = dims[-1], dims[inner]
    outer = math.prod(n for i, (n, _) in enumerate(dims[:-1]) if i != inner)
    dma = vec = pe = 0.0
    for pa in _tiles(n_a):
        for qb in _tiles(n_b):
            dma += (quick.dma_ns(pa * qb * b, qb * b, pa, target, latency=False)
                    + quick.dma_ns(pa * qb * b, pa * b, qb, target, latency=False))
            pe += quick.matmul_ns(pa, 4, target)
            vec += quick.vector_ns(pa, 1, b, target)
    return outer * max(dma, pe, vec) + 2 * quick.dma_ns(0, 1, 1, target)


#: free dims of the Vector Engine copy's access pattern: the SBUF pattern holds up to four,
#: "though most instructions only support 1D/2D/3D in the free dimension"
#: (nki/deep-dives/nki-aps.rst)
COPY_FREE_DIMS = 3


def sbuf_chunk(dims: list[tuple[int, int]], b: int) -> int:
    """Elements of dims[1] per `sbuf` tile (0: the free dims do not fit a tile, or need
    more than COPY_FREE_DIMS pattern dims)."""
    if not 2 <= len(dims) <= COPY_FREE_DIMS + 1:
        return 0
    rest = math.prod(n for n, _ in dims[2:]) * b
    if rest > SBUF_TILE_BYTES:
        return 0
    return min(dims[1][0], SBUF_TILE_BYTES // rest)


def sbuf_ns(dims: list[tuple[int, int]], chunk: int, b: int, target: str) -> float:
    """Per [<=128 partitions, chunk] tile: a load with the source's runs, one Vector
    Engine copy, a contiguous store; loads, copies and stores of successive tiles overlap."""
    rest = math.prod(n for n, _ in dims[2:])
    inner = [(chunk, dims[1][1]), *dims[2:]]
    run = min(run_elems(inner), chunk * rest) * b
    dma = vec = 0.0
    for p in _tiles(dims[0][0]):
        for c in _tiles(dims[1][0], chunk):
            size = p * c * rest * b
            dma += (quick.dma_ns(size, run, p, target, latency=False)
                    + quick.dma_ns(size, c * rest * b, p, target, latency=False))
            vec += quick.vector_ns(c * rest, 1, b, target)
    return max(dma, vec) + 2 * quick.dma_ns(0, 1, 1, target)


def _tiles(n: int, tile: int = PMAX) -> list[int]:
    return [tile] * (n // tile) + ([n % tile] if n % tile else [])


def elem_bytes(dtype: str) -> int:
    """Bytes of one element of a torch-named dtype ("bfloat16", "int64", "bool", ...)."""
    for bits, size in (("64", 8), ("32", 4), ("16", 2), ("8", 1)):
        if bits in dtype:
            return size
    return 1 if dtype == "bool" else 4
