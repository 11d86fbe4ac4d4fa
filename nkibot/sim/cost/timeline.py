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


_INF = float("inf")


class Pool:
    """Busy intervals of the DMA queues taken as one pool (a transfer over P partitions
    takes a min(P, 16)/16 share of it for its whole time), and the free gaps between them.

    A transfer takes the earliest gap long enough at or after its ready time, so it may
    fill a gap left before a later-issued one (the compiler orders independent DMAs of an
    affine loop freely). The gaps of positive length are kept beside the intervals, so
    placing a transfer skips back-to-back runs of busy time at once; at most `keep`
    intervals are kept, older ones fold into `floor` (nothing is placed before it).
    """

    __slots__ = ("busy", "floor", "gap_ends", "gap_starts", "keep")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.busy: list[tuple[float, float]] = []  # sorted, disjoint
        self.floor = 0.0
        self.gap_starts: list[float] = [-_INF]
        self.gap_ends: list[float] = [_INF]

    def place(self, ready: float, length: float) -> float:
        """Take the earliest gap of `length` at or after `ready`; return its start."""
        slot = max(ready, self.floor)
        if length <= 0:
            return self._place_empty(slot)
        gs, ge = self.gap_starts, self.gap_ends
        i = bisect_right(ge, slot)  # the first gap ending after `slot` (the last: never)
        while True:
            pos = gs[i] if gs[i] > slot else slot
            if pos + length <= ge[i]:
                break
            i += 1
        end, g0, g1 = pos + length, gs[i], ge[i]
        starts, ends = [], []
        if pos > g0:
            starts.append(g0)
            ends.append(pos)
        if g1 > end:
            starts.append(end)
            ends.append(g1)
        gs[i:i + 1], ge[i:i + 1] = starts, ends
        self._insert(pos, end)
        return pos

    def fill(self, ready: float, length: float) -> tuple[float, float]:
        """Take `length` of idle time at or after `ready`, in as many gaps as it needs;
        return (start of the first piece, end of the last).

        A transfer is a stream of packets the 16 DMA engines process interleaved with
        those of other transfers in flight (DMA:38-42, "every DMA transfer incurs
        descriptor setup ... per-packet overhead"), so it uses whatever engine time is
        idle from its ready time on. Reserving one unbroken slot instead left gaps
        shorter than a transfer idle, and which gaps were left depended on the order
        transfers were issued: removing an instruction could make a kernel slower.
        """
        slot = max(ready, self.floor)
        if length <= 0:
            at = self._place_empty(slot)
            return at, at
        gs, ge = self.gap_starts, self.gap_ends
        i = bisect_right(ge, slot)
        start, left = -1.0, length
        while True:
            pos = gs[i] if gs[i] > slot else slot
            take = min(left, ge[i] - pos)
            if take <= 0:
                i += 1
                continue
            if start < 0:
                start = pos
            end, g0, g1 = pos + take, gs[i], ge[i]
            starts, ends = [], []
            if pos > g0:
                starts.append(g0)
                ends.append(pos)
            if g1 > end:
                starts.append(end)
                ends.append(g1)
            gs[i:i + 1], ge[i:i + 1] = starts, ends
            i += len(starts)
            left -= take
            self._insert(pos, end)
            if left <= 1e-9:
                return start, end
            slot = max(end, self.floor)
            i = bisect_right(ge, slot)

    def _insert(self, s: float, e: float) -> None:
        busy = self.busy
        busy.insert(bisect_right(busy, (s, e)), (s, e))
        if len(busy) > self.keep:
            self.floor = max(self.floor, busy[self.keep // 2 - 1][1])
            del busy[: self.keep // 2]
            drop = bisect_right(self.gap_ends, self.floor)
            del self.gap_starts[:drop], self.gap_ends[:drop]

    def _place_empty(self, slot: float) -> float:
        """A zero-length transfer: the first place between intervals at or after `slot`."""
        for s, e in self.busy:
            if slot <= s:
                break
            slot = max(slot, e)
        self._insert(slot, slot)
        self._regap()
        return slot

    def _regap(self) -> None:
        prev, self.gap_starts, self.gap_ends = -_INF, [], []
        for s, e in self.busy:
            if s > prev:
                self.gap_starts.append(prev)
                self.gap_ends.append(s)
            prev = max(prev, e)
        self.gap_starts.append(prev)
        self.gap_ends.append(_INF)
