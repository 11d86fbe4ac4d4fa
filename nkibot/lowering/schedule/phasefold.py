"""A strided transposed convolution by output phase: each dim's phases (`PhaseDim`), and
how their taps fold on the partitions (`PhaseFold`) or their output rows band on the
columns (`PhaseBand`). Pure: modelled times from the cost model's closed forms;
`emit/conv/convphase.py` and `convphaseband.py` emit the chosen form.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from nkibot.lowering.schedule import convfold
from nkibot.lowering.schedule.convspec import NMAX, ConvSpec, Dim
from nkibot.lowering.schedule.tiling import PMAX
from nkibot.sim.cost.quick import SBUF_BYTES, pass_ns

# bytes per partition (of 192 KiB) for the resident plane, the weights and the output tile
# (no band form here: the plane stays whole; KernelBench 73's 128 KiB plane fits)


# bytes per partition (of 192 KiB) for the resident plane, the weights and the output tile
# (no band form here: the plane stays whole; KernelBench 73's 128 KiB plane fits)
PHASE_BUDGET = SBUF_BYTES * 7 // 8  # 168 KiB on trn1


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
    phase has taps, the plane, weights and output tile fit PHASE_BUDGET), else None."""
    if not spec.transposed or all(d.up == 1 for d in spec.dims):
        return None
    dims = [phase_dim(d) for d in spec.dims]
    if any(p is None for p in dims):
        return None
    out = tuple(p for p in dims if p is not None)
    tile = math.prod(phase_tiles(spec, out))
    room = (PHASE_BUDGET - 4 * tile) // 4 - spec.cout_g * spec.taps
    return out if math.prod(p.plane for p in out) <= room else None


def faster(spec: ConvSpec, dims: tuple[PhaseDim, ...]) -> bool:
    """Modelled Tensor Engine time (each matmul max(N, 64) cycles) of the phase form below
    the zero-inserted form's (same output tiles of up to 512 positions per phase)."""
    positions = math.prod(d.size_out for d in spec.dims)
    zero = spec.taps * max(positions, 64 * math.ceil(positions / NMAX))
    per = math.ceil(positions / math.prod(p.stride for p in dims))
    calls = math.ceil(per / NMAX)
    phase = sum(math.prod(ph.count for ph in combo) * max(per, 64 * calls)
                for combo in itertools.product(*(p.phases for p in dims)))
    return phase < zero


@dataclass(frozen=True)
class PhaseFold:
    """f taps of dim `dim` stacked on the partitions, per phase in reverse tap order: block
    u holds the plane shifted left by u * shift; weight position J - 1 - b of phase r
    holds its tap b * f + u counted from the last (J = ceil(count / f))."""

    dim: int
    f: int


@dataclass(frozen=True)
class PhaseBlocks:
    """f_i taps of each of two or more dims stacked on the partitions (`sizes`, 1 for a
    dim not folded), per combination of the folded dims' phases: block u = (u_0, u_1, ...)
    (row-major) holds the plane shifted left by u_i * shift_i; weight position J_i - 1 -
    b_i holds, in block u, the phase's tap b_i * f_i + u_i of dim i counted from the last
    (J_i = ceil(count_i / f_i)). A base tap whose blocks are not all taps (a count not
    divisible by f_i) contracts the blocks up to its last valid one, the others' weights
    zero. KernelBench level 2 93 (4 x 4 taps, stride 2: 2 x 2 a phase, 32 channels): one
    matmul a phase, where folding one dim took two."""

    sizes: tuple[int, ...]

    @property
    def blocks(self) -> int:
        return math.prod(self.sizes)

    @property
    def folded(self) -> tuple[int, ...]:
        return tuple(i for i, f in enumerate(self.sizes) if f > 1)

    def bases(self, combo: tuple[Phase, ...]) -> list[tuple[int, ...]]:
        """The base taps b (per folded dim) of a phase combination, in order."""
        return list(itertools.product(*(range(-(-combo[i].count // self.sizes[i]))
                                         for i in self.folded)))

    def rows(self, combo: tuple[Phase, ...], base: tuple[int, ...]) -> int:
        """Blocks a base contracts: up to (with) its last block whose taps all exist, in
        row-major order."""
        index = 0
        for i, f in enumerate(self.sizes):
            valid = 1
            if f > 1:
                valid = min(f, combo[i].count - base[self.folded.index(i)] * f)
            index = index * f + valid - 1
        return index + 1

    def holes(self, combo: tuple[Phase, ...]) -> bool:
        """Whether some base contracts a block that is not one of its taps."""
        return any(combo[i].count % self.sizes[i] for i in self.folded)


def choose_fold(spec: ConvSpec, dims: tuple[PhaseDim, ...], elem_bytes: int
                ) -> PhaseFold | PhaseBlocks | PhaseBand:
    """The (dim, f) of least modelled PE time (matmuls x max(N, 64) cycles, fp32 4x, at
    2.8 GHz) plus plane loads (f copies at 272 B/ns, counted twice), cin * f <= 128; a
    fold whose plane copies and output would take the DMA queues longer than its matmuls
    take the PE is not taken. A band of output rows per phase (convphaseband.py) when it
    is faster still; taps of several dims stacked at once (`PhaseBlocks`) when that is
    faster than any one dim's."""
    return fold_cost(spec, dims, elem_bytes)[1]


def fold_cost(spec: ConvSpec, dims: tuple[PhaseDim, ...], elem_bytes: int
              ) -> tuple[float, PhaseFold | PhaseBlocks | PhaseBand]:
    """choose_fold's modelled ns per batch element and group, and its fold. The matmuls'
    cycles are counted over all of a phase's output tiles (before 2026-12-04 over one
    tile only, against a whole plane's loads: folds stayed too small, e.g. KernelBench 72
    stacked 2 of its 4 taps where it could 3)."""
    per = math.prod(d.size_out for d in spec.dims) // math.prod(p.stride for p in dims)
    cycles = convfold.pe_ns(max(per, 64 * -(-per // NMAX)), elem_bytes)
    plane = convfold.load_ns(spec.cin_g * math.prod(p.plane for p in dims) * elem_bytes * 2)
    out = convfold.load_ns(spec.cout_g * math.prod(d.size_out for d in spec.dims) * elem_bytes)
    best: tuple[float, PhaseFold | PhaseBlocks] = (math.inf, PhaseFold(0, 1))
    pe, copies = math.inf, 1
    for i, p in enumerate(dims):
        for f in range(1, min(max(ph.count for ph in p.phases), PMAX // spec.cin_g) + 1):
            calls = sum(math.prod(-(-ph.count // f) if j == i else ph.count
                                  for j, ph in enumerate(combo))
                        for combo in itertools.product(*(q.phases for q in dims)))
            if f > 1 and f * plane + out > calls * cycles:
                continue  # DMA bound: more copies slow it (KernelBench 79: 0.54 -> 0.37)
            if calls * cycles + f * plane < best[0]:
                best, pe = (calls * cycles + f * plane, PhaseFold(i, f)), calls * cycles
                copies = f
    # several dims at once: taken when the slower of its PE and DMA times beats the one-dim
    # fold's (its plane copies may make it DMA bound and still faster: level 2 93)
    slowest = max(pe, copies * plane + out)
    most = [max(ph.count for ph in p.phases) for p in dims]
    for sizes in itertools.product(*(range(1, m + 1) for m in most)):
        blocks = math.prod(sizes)
        if sum(f > 1 for f in sizes) < 2 or spec.cin_g * blocks > PMAX:
            continue  # one dim's folds are above
        calls = sum(math.prod(-(-ph.count // f) for ph, f in zip(combo, sizes, strict=True))
                    for combo in itertools.product(*(q.phases for q in dims)))
        if max(calls * cycles, blocks * plane + out) < slowest:
            slowest = max(calls * cycles, blocks * plane + out)
            best, pe = (calls * cycles + blocks * plane, PhaseBlocks(sizes)), calls * cycles

    band = choose_band(spec, dims, elem_bytes, (best[0], pe))
    return band if band is not None else best


def evict_engines(tail: dict[str, float] | None, phases: int) -> tuple[str, ...]:
    """The engine each of a tile's `phases` PSUM evictions (the bias add, a strided write
    into the tile) runs on: the Vector Engine's tensor_scalar, or the Scalar Engine's
    activation copy (its bias the same [p, 1] column). The split (k phases on the Scalar
    Engine) is the one whose busier engine, with the tail's load, is least; ties keep the
    Vector Engine. `tail`: the modelled ns per element the tail gives each engine
    (convtail.TailCall.busy); no tail, the Vector Engine for all. Each phase is 1/phases
    of the tile's elements. All or nothing before (level 2 93, a min on the Vector Engine
    and a GELU and a scale on the Scalar Engine: 994 against 794 us busy, model estimate
    trn1)."""
    if not tail:
        return ("vector",) * phases
    v, s = tail.get("vector", 0.0), tail.get("scalar", 0.0)
    pv, ps = pass_ns("vector") / phases, pass_ns("scalar") / phases
    k = min(range(phases + 1), key=lambda k: (max(v + (phases - k) * pv, s + k * ps), k))
    return ("scalar",) * k + ("vector",) * (phases - k)


def phase_tiles(spec: ConvSpec, dims: tuple[PhaseDim, ...]) -> tuple[int, ...]:
    """Output tile per dim: whole phases (a multiple of the stride), up to 512 positions
    per phase, innermost first."""
    sizes: list[int] = []
    room = NMAX
    for d, p in zip(reversed(spec.dims), reversed(dims), strict=True):
        per = -(-d.size_out // p.stride)
        t = max(1, min(per, room))
        sizes.insert(0, min(t * p.stride, d.size_out))
        room = room // t if t == per else 1
    return tuple(sizes)


@dataclass(frozen=True)
class PhaseBand:
    """R phase rows of dim `dim` on the columns, A plane blocks on the partitions."""

    dim: int
    blocks: int
    rows: int

    def shifts(self, ph: Phase) -> int:
        """Base shifts (matmuls) of a phase of the banded dim: J."""
        return -(-(ph.count + self.rows - 1) // self.blocks) if ph.count else 0


def _phase_rows(d: Dim, p: PhaseDim, r: int) -> int:
    """Outputs of phase r: o = m * stride + r < size_out."""
    return -(-(d.size_out - r) // p.stride)


def groups(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand) -> int:
    d, p = spec.dims[band.dim], dims[band.dim]
    return -(-_phase_rows(d, p, 0) // band.rows)


def _last(ph: Phase) -> int:
    return ph.offset - (ph.count - 1) * ph.shift


def plane_len(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand) -> int:
    """Rows of each block of the banded dim's plane: up to the last group's last shift."""
    p, n = dims[band.dim], groups(spec, dims, band)
    need = [band.rows * (n - 1) + _last(ph) + (band.shifts(ph) - 1) * band.blocks + 1
            for ph in p.phases if ph.count]
    return max([p.plane, *need])


def band_tiles(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand) -> tuple[int, ...]:
    """Tile per dim, innermost first, up to 512 positions a phase: the banded dim in
    groups of R phase rows, the others in output rows (whole phases)."""
    sizes: list[int] = []
    room = NMAX
    for i in reversed(range(len(dims))):
        d, p = spec.dims[i], dims[i]
        per = groups(spec, dims, band) if i == band.dim else -(-d.size_out // p.stride)
        t = max(1, min(per, room))
        sizes.insert(0, t if i == band.dim else min(t * p.stride, d.size_out))
        room = room // t if t == per else 1
    return tuple(sizes)


def band_fits(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand) -> bool:
    i, cols = band.dim, spec.cout_g * band.rows
    planes = [plane_len(spec, dims, band) if j == i else p.plane for j, p in enumerate(dims)]
    others = math.prod(d.taps for j, d in enumerate(spec.dims) if j != i)
    weights = sum(cols * band.shifts(ph) * others for ph in dims[i].phases)
    tile = math.prod(band_tiles(spec, dims, band)) * dims[i].stride
    return (math.prod(planes) + weights + tile) * 4 <= PHASE_BUDGET


def band_cost(spec: ConvSpec, dims: tuple[PhaseDim, ...], band: PhaseBand, elem_bytes: int
         ) -> tuple[float, float, float]:
    """(modelled ns, PE ns, DMA ns) per batch element and group, as fold_cost
    counts a fold (matmuls x max(N, 64) cycles over all tiles, A plane copies counted
    twice) plus the output's DMA runs (rows of the dims inside the band)."""
    i = band.dim
    per = groups(spec, dims, band) * math.prod(
        -(-d.size_out // p.stride) for j, (d, p) in enumerate(zip(spec.dims, dims,
                                                                   strict=True)) if j != i)
    cycles = convfold.pe_ns(max(per, 64 * -(-per // NMAX)), elem_bytes)
    calls = sum(math.prod(band.shifts(ph) if j == i else ph.count for j, ph in enumerate(combo))
                for combo in itertools.product(*(q.phases for q in dims)))
    plane = convfold.load_ns(spec.cin_g * math.prod(p.plane for p in dims) * elem_bytes * 2)
    out = spec.cout_g * math.prod(d.size_out for d in spec.dims) * elem_bytes
    runs = spec.cout_g * math.prod(d.size_out for d in spec.dims[:i + 1])
    dma = (band.blocks * plane + convfold.load_ns(out)
           + runs * convfold.DESCRIPTOR_NS / convfold.QUEUES)
    pe = calls * cycles
    return pe + dma, pe, dma


def choose_band(spec: ConvSpec, dims: tuple[PhaseDim, ...], elem_bytes: int,
           plain: tuple[float, float]) -> tuple[float, PhaseBand] | None:
    """The band of least `cost` below the plain fold's (cost, PE ns) `plain`, cutting its
    PE time and no longer on the DMA queues than on the PE, within the budget; None when
    none is. Only undilated dims (each tap one plane row further) band."""
    if spec.cout_g * 2 > PMAX:
        return None
    best: tuple[float, PhaseBand] | None = None
    for i, d in enumerate(spec.dims):
        if d.dil != 1 or _phase_rows(d, dims[i], 0) < 2:
            continue
        for rows in range(2, PMAX // spec.cout_g + 1):
            for a in range(1, PMAX // spec.cin_g + 1):
                band = PhaseBand(i, a, rows)
                total, pe, dma = band_cost(spec, dims, band, elem_bytes)
                if (total < plain[0] and dma <= pe < plain[1]
                        and (best is None or total < best[0]) and band_fits(spec, dims, band)):
                    best = (total, band)
    return best
