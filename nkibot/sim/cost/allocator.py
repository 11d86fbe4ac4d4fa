"""The compiler's allocator applied to a recorded instruction stream (liveness.py's rules).

`apply` runs in `Recorder.finish`, before placement: it finds each announced allocation's
uses in the queue, makes each rotated tile's first instruction wait for every access to
the tile whose buffer it takes, and inserts the spill saves and reloads (DMA transfers
placed like any other) where the live tiles exceed a partition's SBUF or PSUM.
"""

from __future__ import annotations

from typing import Any

from nkibot.sim.cost import model as M
from nkibot.sim.cost.deadcode import Item
from nkibot.sim.cost.liveness import WHOLE, Alloc, Spill, depths, rotation, spills


def apply(rec: Any, queue: list[Item], allocs: list[Alloc]) -> list[Item]:
    """`queue` with the allocator's effects (liveness.py): each rotated tile's first
    instruction waits for every access to its buffer's previous tile, and spills are
    saved and reloaded where the live tiles exceed a partition's SBUF or PSUM."""
    by_entries = {id(a.entries): a for a in allocs}
    for i, item in enumerate(queue):
        for member in item[2]:
            from_hbm = item[0] == "dma" and any(not acc[3] and not acc[2] for acc in member)
            for acc in member:
                a = by_entries.get(id(acc[0]))
                if a is not None:
                    if not a.uses or a.uses[-1] != i:
                        a.uses.append(i)
                    if acc[2] and not from_hbm and a.dirty > i:
                        a.dirty = i
    base = rec.placed  # the rotation's slots span batches (LNC core switches)
    rec.placed += len(queue)
    t, n = rec.target, len(queue)
    sb = [a for a in allocs if not a.psum]
    ps = [a for a in allocs if a.psum]
    want = int(rec.knobs.loop_buffers)
    depth = {**depths(sb, n, t.sbuf_bytes, want), **depths(ps, n, t.psum_bytes, want)}
    for a in allocs:
        a.uses = [base + u for u in a.uses]
    for tile, prev in rotation(allocs, depth, rec.slots):
        queue[tile.uses[0] - base][2][0].append((prev.entries, WHOLE, True, True))
    for a in allocs:
        a.uses = [u - base for u in a.uses]
    for a in allocs:
        if depth.get(a.site, want) == 1 < want and a.name not in rec.single:
            rec.single.append(a.name)
    if not rec.knobs.model_spills:
        return queue
    lead = int(rec.knobs.spill_lead)
    found = [*spills(sb, n, t.sbuf_bytes, lead), *spills(ps, n, t.psum_bytes, lead)]
    return _spill(rec, queue, found) if found else queue

def _spill(rec: Any, queue: list[Item], found: list[Spill]) -> list[Item]:
    """`queue` with a save after and a reload before each spilled tile's gap."""
    after: dict[int, list[Item]] = {}
    before: dict[int, list[Item]] = {}
    rooms: dict[int, list[list[list[Any]]]] = {}  # at -> the saves that made room there
    made: list[list[list[Any]]] = [[] for _ in found]
    for sp, room in zip(found, made, strict=True):
        rooms.setdefault(sp.at, []).append(room)
    for sp, room in zip(found, made, strict=True):
        a = sp.alloc
        due: list[list[Any]] = []  # the instruction before the reload's place: reload then
        engine, info = _mover(rec, a)
        refill = a.dirty > sp.after  # still a copy of HBM data: re-read it, save nothing
        if refill:  # the room is free once its previous use is done
            queue[sp.after][2][0].append((room, WHOLE, True, True))
        else:
            after.setdefault(sp.after, []).append(
                (engine, "spill_save", [[(a.entries, WHOLE, False, True),
                                         (room, WHOLE, True, True)]], info, True))
        queue[sp.at][2][0].append((room, WHOLE, False, True))
        if sp.before - 1 > sp.after:
            queue[sp.before - 1][2][0].append((due, WHOLE, True, True))
        # the reload's own room: the saves chosen where it comes back
        wait = [(r, WHOLE, False, True) for r in rooms.get(sp.before, ()) if r is not room]
        before.setdefault(sp.before, []).append(
            (engine, "spill_reload", [[(a.entries, WHOLE, True, True),
                                       (due, WHOLE, False, True), *wait]], info, True))
        got = rec.spilled.setdefault(a.name, [0.0, 0])
        got[0] += a.nbytes * a.parts
        got[1] += 1
        if refill:
            rec.refill_bytes += a.nbytes * a.parts
        else:
            rec.spill_bytes += a.nbytes * a.parts
    out: list[Item] = []
    for i, item in enumerate(queue):
        out += before.get(i, ())
        out.append(item)
        out += after.get(i, ())
    return out


def _mover(rec: Any, a: Alloc) -> tuple[str, tuple[Any, ...]]:
    """What moves a spilled tile to the next tier and back (memory-hierarchy-overview.rst:
    86, "between that memory and the next-tier memory in the hierarchy"): SBUF's is HBM,
    over the DMA queues; PSUM's is SBUF, a Vector Engine copy of its fp32 elements, the
    engines that overview has evict PSUM (memory-hierarchy-overview.rst:79-83)."""
    if not a.psum:
        return "dma", (float(a.nbytes * a.parts), max(1, min(a.parts, rec.target.dma_queues)),
                       max(1, a.nbytes))
    free = (a.nbytes // 4, 4, False, False)
    ports = ("sbuf_port", "psum_port") if rec.target.shared_ports else ()
    return "vector", (*M.elementwise_parts(rec.target, "vector", [free], [free], rec.knobs),
                      ports)

