"""The recorder: one timeline per engine and per DMA queue, ordered by tile dependencies.

Each engine runs its instructions in program order (its own sequencer, ARCH1:54); an
instruction also waits for the tiles it reads to be written (RAW) and for earlier
readers and writers of the tiles it writes (WAR/WAW), as the hardware semaphores do.
Tiles are tracked per allocation as partition x byte ranges, so two instructions on
disjoint slices of one tile do not wait for each other. Allocations are never reused
(no WAR through a recycled buffer): the model assumes the compiler's buffering.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from nkibot.sim.cost import constants as C
from nkibot.sim.cost import model as M
from nkibot.sim.cost.timeline import Timeline, earliest
from nkibot.sim.cost.vectorize import Member, Vectorizer
from nkibot.sim.storage import handle
from nkibot.sim.tensor import MemoryRegion, NkiTensor

ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_MAX_ENTRIES = 24
_MAX_DMA_GAPS = 64
Region = tuple[int, int, int, int]


class _ArrayInterface(ctypes.Structure):
    """NumPy's PyArrayInterface (the `__array_struct__` capsule's payload)."""

    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("data", ctypes.c_void_p)]


_capsule = ctypes.pythonapi.PyCapsule_GetPointer
_capsule.restype = ctypes.POINTER(_ArrayInterface)
_capsule.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _address(arr: np.ndarray[Any, Any]) -> int:
    """The view's data address: through `__array_struct__`, ~2x cheaper than
    `__array_interface__` (which builds a dict); this is the hook's hottest line."""
    data: int | None = _capsule(arr.__array_struct__, None).contents.data
    return data or 0


class _Tile:
    """What the recorder keeps per allocation: its base address and access entries."""

    __slots__ = ("addr", "alloc", "entries", "on_chip", "row")

    def __init__(self, t: NkiTensor) -> None:
        h = handle(t)
        base = h.alloc.base
        self.alloc = weakref.ref(h.alloc)
        self.addr = _address(base)
        self.row = base.strides[0] if base.ndim else 0
        self.on_chip = t.buffer in M.ON_CHIP
        #: [p0, p1, b0, b1, is_write, end_ns, instruction index]
        self.entries: list[list[Any]] = []

    def region(self, t: NkiTensor) -> Region:
        """(p0, p1, b0, b1): partitions and bytes within a partition (HBM: one partition)."""
        arr = handle(t).arr
        off = _address(arr) - self.addr
        span = arr.itemsize
        shape, strides = arr.shape, arr.strides
        for i in range(1, len(shape)):
            span += (shape[i] - 1) * abs(strides[i])
        if self.on_chip:
            if shape and self.row and strides[0] == self.row:
                p0, b0 = divmod(off, self.row)
                return p0, p0 + shape[0], b0, b0 + span
            return 0, 1 << 30, 0, 1 << 62
        if shape:
            span += (shape[0] - 1) * abs(strides[0])
        return 0, 1, off, off + span


class Recorder:
    """Fed by the issue hook; `report()` turns what it saw into figures."""

    def __init__(self, target: C.Target, knobs: M.Knobs | None = None) -> None:
        self.target, self.knobs = target, knobs or M.Knobs()
        self.depth = 0
        self.cores = 1
        #: The logical core issuing now, and the other cores' per-core model state.
        self.core = 0
        self.saved: dict[int, tuple[Any, ...]] = {}
        self.lines = {r: Timeline() for r in (*ENGINES, "sbuf_port", "psum_port")}
        self.busy = dict.fromkeys((*ENGINES, "dma"), 0.0)
        self.count_by = dict.fromkeys((*ENGINES, "dma"), 0)
        self.dma_busy: list[tuple[float, float]] = []  # sorted busy intervals of the pool
        self.dma_floor = 0.0  # nothing is placed before this (older intervals dropped)
        self.last: dict[str, int] = {}
        self.tiles: dict[int, _Tile] = {}
        self.path: list[tuple[str, float, float, int]] = []  # engine, start, end, pred
        self.makespan = 0.0
        self.dma_bytes = 0.0
        self.dma_transfers = 0
        self.dma_ideal_ns = 0.0
        self.flops = {"bf16": 0.0, "fp32": 0.0}
        #: "engine:op" -> [instructions, busy ns]: where each engine's time goes.
        self.by_op: dict[str, list[Any]] = {}
        self._op = ""
        self._reads: list[NkiTensor] = []
        self._writes: list[NkiTensor] = []
        self._pending: list[tuple[str, int]] = []
        self.vec = Vectorizer(self._issue, C.VECTORIZE_MAX_FREE, self.knobs.loop_vectorize)

    # ---- affine loops (the legacy compiler's loop vectorization, vectorize.py) --------
    def loop_enter(self, trip: int) -> None:
        self.vec.enter(trip)

    def loop_next(self) -> None:
        self.vec.next()

    def loop_exit(self) -> None:
        self.vec.exit()

    def switch_core(self, pid: int) -> None:
        """Logical core `pid` (LNC2) issues next: each core has its own engines, queues and
        loop buffer, and a core seen for the first time starts at time 0. Cores switch
        only at core_barrier / sendrecv or when one finishes (`nkibot.sim.lnc`); the model
        does not make a barrier wait for the other core's clock."""
        if pid == self.core:
            return
        self.saved[self.core] = (self.lines, self.dma_busy, self.dma_floor, self.last,
                                 self.tiles, self.vec)
        if pid in self.saved:
            (self.lines, self.dma_busy, self.dma_floor, self.last, self.tiles,
             self.vec) = self.saved.pop(pid)
        else:
            self.cores += 1
            self.lines = {r: Timeline() for r in self.lines}
            self.dma_busy, self.dma_floor = [], 0.0
            self.last, self.tiles = {}, {}
            self.vec = Vectorizer(self._issue, C.VECTORIZE_MAX_FREE, self.knobs.loop_vectorize)
        self.core = pid

    # ---- the hook ---------------------------------------------------------------------
    def begin(self, op: str, reads: list[NkiTensor], writes: list[NkiTensor]) -> None:
        self.depth += 1
        self._op = op
        self._reads = reads
        self._writes = writes
        self._pending = []

    def count(self, engine: str, elements: int) -> None:
        if self.depth:
            self._pending.append((engine, elements))
        else:  # an instruction outside any traced call (tile[...] = x): no operands
            self.issue(engine, "setitem", [], [])

    def end(self, results: list[NkiTensor]) -> None:
        writes = self._writes + [t for t in results if all(t is not w for w in self._writes)]
        for engine, _ in self._pending:
            self.issue(engine, self._op, self._reads, writes)
        self._pending = []

    # ---- scheduling -------------------------------------------------------------------
    def _tile(self, t: NkiTensor) -> _Tile:
        alloc = handle(t).alloc
        got = self.tiles.get(id(alloc))
        if got is None or got.alloc() is not alloc:
            got = self.tiles[id(alloc)] = _Tile(t)
        return got

    def _access(self, reads: list[NkiTensor], writes: list[NkiTensor]
                ) -> list[tuple[list[list[Any]], Region, bool]]:
        out = []
        for is_write, group in ((False, reads), (True, writes)):
            for t in group:
                tile = self._tile(t)
                out.append((tile.entries, tile.region(t), is_write))
        return out

    @staticmethod
    def _ready(access: list[tuple[list[list[Any]], Region, bool]]) -> tuple[float, int]:
        ready, pred = 0.0, -1
        for entries, (p0, p1, b0, b1), is_write in access:
            for e in entries:
                if (e[5] > ready and (is_write or e[4]) and e[0] < p1 and p0 < e[1]
                        and e[2] < b1 and b0 < e[3]):
                    ready, pred = e[5], e[6]
        return ready, pred

    @staticmethod
    def _record(access: list[tuple[list[list[Any]], Region, bool]], end: float,
                idx: int) -> None:
        for entries, r, is_write in access:
            if is_write:
                entries[:] = [e for e in entries if not (r[0] <= e[0] and e[1] <= r[1]
                                                         and r[2] <= e[2] and e[3] <= r[3])]
            else:
                same = next((e for e in entries if not e[4] and e[0] == r[0] and e[1] == r[1]
                             and e[2] == r[2] and e[3] == r[3]), None)
                if same is not None:  # a tile read again: one entry, the latest reader
                    if end > same[5]:
                        same[5], same[6] = end, idx
                    continue
            entries.append([*r, is_write, end, idx])
            if len(entries) > _MAX_ENTRIES:
                del entries[: _MAX_ENTRIES // 2]

    def issue(self, engine: str, op: str, reads: list[NkiTensor],
              writes: list[NkiTensor]) -> None:
        if (op == "broadcast_to" and reads and writes
                and writes[0].shape[0] > reads[0].shape[0]):
            engine = "tensor"  # ARCH1:201-203: NKI broadcasts partitions with a matmul
        if self.vec.frames and self.vec.offer(engine, op, reads, writes):
            return  # buffered by an affine loop that may be vectorised
        self._issue(engine, op, [(reads, writes)])

    def _issue(self, engine: str, op: str, members: list[Member]) -> None:
        """Place one instruction covering `members` (several: a vectorised loop body)."""
        accesses = [self._access(r, w) for r, w in members]
        # the latest-ready member sets the start (the first of equals, as program order)
        ready, pred = max((self._ready(a) for a in accesses), key=lambda rp: rp[0])
        reads, writes = members[0]
        if engine == "dma":
            start, end = self._dma(ready, reads, writes)
        else:
            start, end, pred = self._compute(engine, op, ready, pred, reads, writes,
                                             len(members))
        idx = len(self.path)
        self.path.append((engine, start, end, pred))
        for a in accesses:
            self._record(a, end, idx)
        if end > self.makespan:
            self.makespan = end

    def _compute(self, engine: str, op: str, ready: float, pred: int, reads: list[NkiTensor],
                 writes: list[NkiTensor], scale: int = 1) -> tuple[float, float, int]:
        t = self.target
        if engine == "tensor":
            dur, flops, fp32 = M.matmul(t, reads, writes, op)
            self.flops["fp32" if fp32 else "bf16"] += flops
            ports: tuple[str, ...] = ()
        else:
            dur = M.elementwise(t, engine, reads, writes, self.knobs, scale)
            ports = self._ports(engine, reads + writes)
        prev = self.last.get(engine, -1)
        if prev >= 0 and pred == prev and engine != "tensor":
            ghz = {"vector": t.vector_ghz, "scalar": t.scalar_ghz}.get(engine, t.gpsimd_ghz)
            dur += self.knobs.dependent_overhead / ghz  # ARCH1:403: no back-to-back overlap
        lines = [self.lines[r] for r in (engine, *ports)]
        if not self.knobs.fill_gaps:  # strict program order per engine
            ready = max(ready, max(tl.last_end for tl in lines))
        start = earliest(lines, ready, dur)
        if start > ready:
            pred = prev  # waited for the engine (or its port), not for a tile
        end = start + dur
        for tl in lines:
            tl.add(start, end)
        self.busy[engine] += dur
        self.count_by[engine] += 1
        got = self.by_op.setdefault(f"{engine}:{op}", [0, 0.0])
        got[0] += 1
        got[1] += dur
        self.last[engine] = len(self.path)
        return start, end, pred

    def _ports(self, engine: str, tiles: list[NkiTensor]) -> tuple[str, ...]:
        if not self.target.shared_ports:
            return ()
        if engine == "gpsimd":
            return ("sbuf_port",)  # ARCH1:764 VectorE and GpSimd cannot access SBUF together
        if engine == "vector":
            psum = any(x.buffer is MemoryRegion.psum for x in tiles)
            return ("sbuf_port", "psum_port") if psum else ("sbuf_port",)
        if engine == "scalar" and any(x.buffer is MemoryRegion.psum for x in tiles):
            return ("psum_port",)  # ARCH1:765 VectorE and ScalarE cannot access PSUM together
        return ()

    def _dma_slot(self, ready: float, length: float) -> float:
        """The earliest gap of `length` at or after `ready` in the DMA queues' busy time.

        The 16 queues are one pool (a transfer spreads over min(P, 16) of them, taking
        that share of the pool). A transfer may fill a gap left before a later-issued
        one: the compiler orders independent DMAs of an affine loop freely.
        """
        busy = self.dma_busy
        slot = max(ready, self.dma_floor)
        at = len(busy)
        for i, (s, e) in enumerate(busy):
            if slot + length <= s:
                at = i
                break
            if e > slot:
                slot = e
        busy.insert(at, (slot, slot + length))
        if len(busy) > _MAX_DMA_GAPS:
            self.dma_floor = max(self.dma_floor, busy[_MAX_DMA_GAPS // 2 - 1][1])
            del busy[: _MAX_DMA_GAPS // 2]
        return slot

    def _dma(self, ready: float, reads: list[NkiTensor],
             writes: list[NkiTensor]) -> tuple[float, float]:
        t, k = self.target, self.knobs
        nbytes, lanes, run = M.dma(t, reads, writes, k)
        per = M.dma_queue_ns(t, nbytes / lanes, run, k)
        occupancy = per * lanes / t.dma_queues
        start = self._dma_slot(ready, occupancy)
        end = max(start + occupancy, ready + per)
        self.busy["dma"] += per * lanes / t.dma_queues
        self.count_by["dma"] += 1
        self.dma_bytes += nbytes
        self.dma_transfers += 1
        self.dma_ideal_ns += nbytes / (t.dma_queue_bw * t.dma_queues)
        return start, end + k.dma_fixed_ns  # DMA:41 the fixed latency delays the consumer
