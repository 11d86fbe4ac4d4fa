"""Cross-core races of an LNC=2 launch: shared-HBM accesses no core_barrier orders.

The scheduler (`lnc.py`) runs one core at a time, so a kernel missing a barrier can still
get the right answer in the order it happens to run. This module catches that: every
byte of a shared_hbm allocation remembers which core last wrote it, and each core's
latest read, with the number of barriers that core had passed then. Core q's access at
barrier count g_q is ordered after core p's access at count g_p only when q has passed
barrier number g_p + 1 (which p could reach only after its access): g_q > g_p. So:

- a read of bytes another core wrote with g_q <= g_p reads unordered data (RAW);
- a write of bytes another core read with g_q <= g_p may land before that read (WAR);
- a write of bytes another core wrote with g_q <= g_p, with different values, leaves
  either value behind (WAW; the same values are benign and pass).

Each raises `lnc-race` at the accessing line, naming the other core's access. Only views
of the storage are tracked (not gathered copies), and only contiguous allocations of at
most `LIMIT_BYTES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkibot.sim.errors import ConstraintError, fail

#: Larger shared_hbm allocations are not tracked (the tracker costs 9 bytes per byte).
LIMIT_BYTES = 16 << 20

Arr = np.ndarray[Any, Any]


class _Track:
    """Per byte of one allocation: last writer core and its barrier count, and each
    core's barrier count at its latest read (-1: never)."""

    __slots__ = ("alloc", "readers", "sites", "wgen", "writer")

    def __init__(self, alloc: Any, n: int, cores: int) -> None:
        self.alloc = alloc  # keeps id() stable while tracked
        self.writer = np.full(n, -1, np.int8)
        self.wgen = np.zeros(n, np.int32)
        self.readers = [np.full(n, -1, np.int32) for _ in range(cores)]
        self.sites: dict[tuple[str, int], str] = {}  # (read|write, core) -> last site


def _address(arr: Arr) -> int:
    return int(arr.__array_interface__["data"][0])


def _view(track: Arr, base: Arr, arr: Arr) -> Arr | None:
    """`track` (one entry per byte of `base`) seen through `arr`'s bytes, or None when
    `arr` is not a view of `base` (a gathered copy)."""
    off = _address(arr) - _address(base)
    lo = off + sum(min(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides, strict=True))
    hi = off + sum(max(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides, strict=True))
    if arr.size == 0 or lo < 0 or hi + arr.itemsize > base.nbytes:
        return None
    k = track.itemsize
    return as_strided(track[off:], shape=(*arr.shape, arr.itemsize),
                      strides=(*(s * k for s in arr.strides), k))


class Races:
    """The race tracker of one LNC launch (held by `lnc.Cores`)."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.tracks: dict[int, _Track] = {}

    def _track(self, alloc: Any) -> _Track | None:
        t = self.tracks.get(id(alloc))
        if t is None:
            if alloc.base.nbytes > LIMIT_BYTES or not alloc.base.flags.c_contiguous:
                return None
            t = self.tracks[id(alloc)] = _Track(alloc, alloc.base.nbytes, self.cores)
        return t

    def access(self, core: int, passed: int, h: Any, write: bool, what: str,
               site: str) -> Callable[[], None] | None:
        """Core `core`, having passed `passed` barriers, reads or writes handle `h`.

        For a write over bytes the other core wrote unordered, returns a check to call
        after the write: it raises when the written bytes differ from what was there.
        """
        t = self._track(h.alloc)
        if t is None:
            return None
        base = h.alloc.base
        w = _view(t.writer, base, h.arr)
        if w is None:
            return None
        g = _view(t.wgen, base, h.arr)
        assert g is not None
        after: Callable[[], None] | None = None
        if write:
            for p in range(self.cores):
                r = _view(t.readers[p], base, h.arr)
                if p != core and r is not None and bool(np.any(r >= passed)):
                    raise self._race(core, p, "writes", "read", what, t)
            unordered = (w >= 0) & (w != core) & (g >= passed)
            if bool(np.any(unordered)):
                after = self._same_bytes(core, int(w[unordered].flat[0]), h, unordered,
                                         what, t)
            w[...] = core
            g[...] = passed
        else:
            unordered = (w >= 0) & (w != core) & (g >= passed)
            if bool(np.any(unordered)):
                p = int(w[unordered].flat[0])
                raise self._race(core, p, "reads", "wrote", what, t)
            r = _view(t.readers[core], base, h.arr)
            if r is not None:
                r[...] = passed
        t.sites[("write" if write else "read", core)] = site
        return after

    def _same_bytes(self, core: int, other: int, h: Any, mask: Arr, what: str,
                    t: _Track) -> Callable[[], None]:
        """A check that the write leaves the other core's unordered bytes unchanged."""
        base = h.alloc.base
        raw = base.reshape(-1).view(np.uint8)
        old = _view(raw, base, h.arr)
        assert old is not None
        before = old[mask].copy()

        def check() -> None:
            now = _view(raw, base, h.arr)
            if now is not None and not np.array_equal(now[mask], before):
                raise self._race(core, other, "overwrites", "wrote", what + " with other "
                                 "values", t)

        return check

    @staticmethod
    def _race(core: int, other: int, verb: str, did: str, what: str,
              t: _Track) -> ConstraintError:
        theirs = t.sites.get(("write" if did == "wrote" else "read", other), "<unknown>")
        return fail("lnc-race", f"core {core} {verb} {what}, which core {other} "
                                f"{did} (last at {theirs}) with no nisa.core_barrier between "
                                "the two: on hardware the order of these accesses is not "
                                "defined")
