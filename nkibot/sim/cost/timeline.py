"""Busy intervals of one modelled resource (an engine, a shared SRAM port).

The compiler schedules the instructions of independent (affine) loop iterations across
engines: the legacy `nl.affine_range` docstring (SDK v2.26.0, general/nki/api/nki/
language/__init__.py:242-245) says "different iterations could be parallelized/pipelined
on different compute engines ... depending on the invoked instructions (engines) and data
dependency". So an instruction whose operands are ready early may take a gap an engine
left idle before a later-issued one, rather than queueing strictly in program order;
dependencies (the semaphores) still order everything that shares a tile.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

#: Intervals kept per resource; older ones fold into `floor` (nothing goes before it).
_KEEP = 64


class Timeline:
    """Disjoint busy intervals, sorted (so starts and ends are both sorted)."""

    __slots__ = ("ends", "floor", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.floor = 0.0

    def conflict(self, t: float, dur: float) -> float | None:
        """The end of the first busy interval overlapping [t, t + dur), if any."""
        i = bisect_right(self.ends, t)
        if i < len(self.starts) and self.starts[i] < t + dur:
            return self.ends[i]
        return None

    def add(self, s: float, e: float) -> None:
        if e <= s:
            return
        starts, ends = self.starts, self.ends
        i = bisect_left(starts, s)
        if i and ends[i - 1] == s:  # back to back: extend the previous interval
            ends[i - 1] = e
            if i < len(starts) and starts[i] == e:
                ends[i - 1] = ends[i]
                del starts[i], ends[i]
            return
        starts.insert(i, s)
        ends.insert(i, e)
        if len(starts) > _KEEP:
            self.floor = max(self.floor, ends[_KEEP // 2 - 1])
            del starts[: _KEEP // 2], ends[: _KEEP // 2]

    @property
    def last_end(self) -> float:
        return self.ends[-1] if self.ends else self.floor


def earliest(lines: list[Timeline], ready: float, dur: float) -> float:
    """The earliest start >= `ready` at which every one of `lines` is free for `dur`."""
    t = ready
    for tl in lines:
        if tl.floor > t:
            t = tl.floor
    moved = True
    while moved:
        moved = False
        for tl in lines:
            c = tl.conflict(t, dur)
            if c is not None:
                t, moved = c, True
    return t
