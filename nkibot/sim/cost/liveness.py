"""On-chip allocations as the compiler places them: buffer rotation, liveness and spills.

Every on-chip `nl.ndarray` allocation (the simulator announces it: `Recorder.allocated`)
is live from its first to its last use in the recorded instruction stream, whatever
NumPy address it got. Two rules of the compiler's allocator follow, both from the NKI
migration guide (nki/migration/index.rst, "Removing block dimensions"):

- **Rotation** (lines 1345-1380, 1496-1515): a tile allocated inside a loop body is one
  logical tile per iteration; "the compiler could unroll the loop and materialize multiple
  copies", e.g. "allocate 2 physical tiles ... then the DMA copy from HBM to SBUF can
  overlap with the exponential operation" ("at the very minimum, only 1 physical tile"
  and the execution is serialised). So the tiles one source line allocates rotate through
  `buffers` physical buffers: a tile reuses the buffer of the tile `buffers` allocations
  before it, once that one is dead, and its first instruction waits for every access to
  it (a true write-after-read on the buffer, which the model missed before: it gave
  every allocation a buffer of its own). A tile still live when its successor is
  allocated (kept in a list, carried across iterations) breaks the rotation: it keeps its
  buffer and the successor gets another.
- **Capacity and spills** (nki/get-started/about/memory-hierarchy-overview.rst:86: "If
  the total size of the live data ... overflows the capacity of any on-chip memory, the
  Neuron compiler will insert the necessary spills or refills"; the perf guide's
  `spill_save_bytes` / `spill_reload_bytes`, deep-dives/nki_perf_guide.rst:142-146): where
  the live bytes per partition exceed the generation's SBUF (or PSUM) partition, a tile
  live across that point but not used there is written out after its previous use and
  read back before its next one. Which tile is the one assumption here (no document says
  how the compiler picks): the one whose next use is farthest (Belady's choice, the
  fewest reloads). The instruction that needed the room waits for the save (the
  serialisation); the reload is issued just before the next use, after the instruction
  before it (the profile in nki/guides/tutorials/fused_mamba.rst:752-770 shows VectorE
  blocked on the spill/reload queue's semaphore).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np

#: A region covering a whole allocation (partitions x bytes).
WHOLE = (0, 1 << 30, 0, 1 << 62, None)


class Alloc:
    """One on-chip allocation, as the recorder saw it (slots: one is made per allocation,
    on the model's hottest path after the instruction hook)."""

    __slots__ = ("dirty", "entries", "label", "nbytes", "parts", "psum", "site", "uses")

    def __init__(self, site: tuple[Any, ...], nbytes: int, parts: int, psum: bool,
                 label: str, entries: list[list[Any]]) -> None:
        self.site = site  # (core, source file, line): the rotation group
        self.nbytes = nbytes  # per partition
        self.parts = parts
        self.psum = psum
        self.label = label  # the allocation's name= ("" when none)
        self.entries = entries  # the recorder's access entries of this allocation
        self.uses: list[int] = []  # queue indices, ascending
        #: The first queue index that writes it with anything but a DMA from HBM: before
        #: it, the tile is a copy of HBM data, refilled from there rather than spilled.
        self.dirty = 1 << 62

    @property
    def name(self) -> str:
        """How the report names it: its name= (or "tile") and kernel line."""
        return f"{self.label or 'tile'} ({str(self.site[1]).rsplit('/', 1)[-1]}:{self.site[2]})"


@dataclass(frozen=True)
class Spill:
    """`alloc` saved after instruction `after`, reloaded before `before` (its next use, or
    `lead` instructions earlier); `at` needed the room."""

    alloc: Alloc
    after: int
    before: int
    at: int


def live_bytes(allocs: list[Alloc], n: int) -> Any:
    """Bytes per partition live before each of `n` instructions (one buffer a tile)."""
    live = np.zeros(n + 1, np.int64)
    used = [a for a in allocs if a.uses]
    if used:
        np.add.at(live, [a.uses[0] for a in used], [a.nbytes for a in used])
        np.add.at(live, [a.uses[-1] + 1 for a in used], [-a.nbytes for a in used])
    return np.cumsum(live)[:n]


def depths(allocs: list[Alloc], n: int, capacity: int, buffers: int
           ) -> dict[tuple[Any, ...], int]:
    """Buffers per rotating site: `buffers`, but fewer (down to 1) for the largest tiles'
    sites while the extra buffers would not fit beside the peak of the live bytes ("a
    space-time tradeoff at liberty", MIGRATION:1371-1373: the compiler serialises before
    it spills). Sites of equal size lose buffers in the order they first rotate (program
    order): an assumption, no document names the compiler's order. A site's key holds
    the recorder's core (an `object()`, hashed by address), so a set of sites iterates
    in another order in every launch: ties broken that way made one kernel's estimate
    vary by 10% between calls (issue 30)."""
    size: dict[tuple[Any, ...], int] = {}
    count: dict[tuple[Any, ...], int] = {}
    last: dict[tuple[Any, ...], int] = {}
    #: sites where a tile begins after an earlier one died, in that order (a dict, never a
    #: set: its order is the tie-break below)
    rotates: dict[tuple[Any, ...], None] = {}
    for a in allocs:
        if a.uses:
            site = a.site
            size[site] = max(size.get(site, 0), a.nbytes)
            count[site] = count.get(site, 0) + 1
            if last.get(site, a.uses[0]) < a.uses[0]:
                rotates[site] = None
            last[site] = max(last.get(site, -1), a.uses[-1])
    extra_of = {s: (min(buffers, count[s]) - 1) * size[s] for s in rotates}
    out = dict.fromkeys(rotates, buffers)
    if not rotates or buffers <= 1:
        return out
    live = live_bytes(allocs, n)
    peak = int(live.max()) if live.size else 0
    extra = sum(extra_of.values())
    for site in sorted(rotates, key=lambda s: -size[s]):
        if peak + extra <= capacity:
            break
        extra -= extra_of[site]  # as many of this site's buffers as still fit, at least 1
        fit = max(0, (capacity - peak - extra) // size[site]) if size[site] else 0
        out[site] = 1 + min(fit, min(buffers, count[site]) - 1)
        extra += (out[site] - 1) * size[site]
    return out


def rotation(allocs: list[Alloc], depth: dict[tuple[Any, ...], int],
             slots: dict[tuple[Any, ...], list[Any]]) -> list[tuple[Alloc, Alloc]]:
    """(tile, the tile whose buffer it reuses) for every tile that reuses one.

    `allocs` in allocation order; `depth`: buffers per site (`depths`; 1 for a site not
    in it); `slots` keeps each site's buffers ([last use, tile]) across calls (the
    recorder places a launch in batches).
    """
    waits = []
    for a in allocs:
        if not a.uses:
            continue
        buffers = depth.get(a.site, 1)
        ring = slots.setdefault(a.site, [])
        first = a.uses[0]
        free = [s for s in ring if s[0] < first]
        if len(ring) < buffers or not free:
            ring.append([a.uses[-1], a])
            continue
        slot = min(free, key=lambda s: s[0])  # the longest dead: rotation order
        waits.append((a, slot[1]))
        slot[0], slot[1] = a.uses[-1], a
    return waits


def spills(allocs: list[Alloc], n: int, capacity: int, lead: int = 1,
           limit: int = 20000) -> list[Spill]:
    """The spills that keep the live bytes of `allocs` within `capacity` per partition
    over a stream of `n` instructions (module docstring). A spilled tile is back
    `lead` instructions before its next use (1: just before it), and its room is
    counted from there; never before the instruction that needed the room."""
    live_ones = [a for a in allocs if a.uses]
    if not live_ones or sum(a.nbytes for a in live_ones) <= capacity:
        return []
    first = np.array([a.uses[0] for a in live_ones])
    last = np.array([a.uses[-1] for a in live_ones])
    size = np.array([a.nbytes for a in live_ones], dtype=np.int64)
    live = live_bytes(live_ones, n)
    out: list[Spill] = []
    done: set[tuple[int, int]] = set()
    start = 0
    while len(out) < limit:
        over = np.flatnonzero(live[start:] > capacity)
        if not over.size:
            break
        i = start + int(over[0])
        pick = _victim(live_ones, np.flatnonzero((first < i) & (last > i)), i, done)
        if pick is None:  # everything live is used right here: nothing to spill
            start = i + 1
            continue
        k, prev, nxt = pick
        done.add((k, prev))
        back = max(i + 1, nxt - max(1, lead) + 1)
        live[prev + 1:back] -= size[k]
        out.append(Spill(live_ones[k], prev, back, i))
        start = i
    return out


def _victim(allocs: list[Alloc], candidates: Any, i: int, done: set[tuple[int, int]]
            ) -> tuple[int, int, int] | None:
    """(index, previous use, next use) of the tile live over `i` used farthest from it."""
    best: tuple[int, int, int] | None = None
    for k in candidates.tolist():
        uses = allocs[k].uses
        j = bisect_right(uses, i)
        prev, nxt = uses[j - 1], uses[j]
        if prev == i or (k, prev) in done:
            continue
        if best is None or nxt > best[2] or (nxt == best[2]
                                             and allocs[k].nbytes > allocs[best[0]].nbytes):
            best = (k, prev, nxt)
    return best
