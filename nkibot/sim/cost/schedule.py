"""The recorder: one timeline per engine and per DMA queue, ordered by tile dependencies.

Each engine runs its instructions in program order (its own sequencer, ARCH1:54); an
instruction also waits for the tiles it reads to be written (RAW) and for earlier
readers and writers of the tiles it writes (WAR/WAW), as the hardware semaphores do.
Tiles are tracked per allocation as partition x byte ranges, so two instructions on
disjoint slices of one tile do not wait for each other. Two strided views of one pattern
(the same strides and extents: one loop's stores into interleaved slices of an output)
overlap only where an element is common to both (`_disjoint`), not wherever their byte
ranges intersect: the slices of channel-major rows a conv tile stores interleave, and
their ranges overlap, but their elements never do. Allocations are never reused
(no WAR through a recycled buffer): the model assumes the compiler's buffering.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from nkibot.sim.cost import allocator
from nkibot.sim.cost import constants as C
from nkibot.sim.cost import model as M
from nkibot.sim.cost.deadcode import Item, live
from nkibot.sim.cost.liveness import WHOLE as _WHOLE
from nkibot.sim.cost.liveness import Alloc
from nkibot.sim.cost.timeline import Pool, Timeline, earliest
from nkibot.sim.cost.vectorize import Member, Vectorizer
from nkibot.sim.storage import handle
from nkibot.sim.tensor import MemoryRegion, NkiTensor

ON_CHIP = M.ON_CHIP

ENGINES = ("tensor", "vector", "scalar", "gpsimd")
_MAX_ENTRIES = 24
#: Busy intervals the DMA pool keeps (older ones fold into its floor, before which nothing
#: is placed). A prefetch is ready one loop iteration before its use, so the pool must
#: remember an iteration's transfers: at 64, level 2 46's next input plane (ready when
#: the buffer two batch elements back was free) came after the 38 stores and loads of one
#: batch element had pushed the floor past its ready time, and the PE waited on it, 16
#: times (853 against 772 us; tests/sim/cost/test_dma_pool.py). A bound on the model's
#: own work, not a hardware figure.
DMA_GAPS_KEPT = 256
#: A strided view's pattern, for `_disjoint`: (((stride, extent), ...) over its dims of
#: extent > 1, outermost first, itemsize), and the byte offset of its lowest element.
#: None when the strides do not nest (each stride at least the span of those inside it).
Pattern = tuple[tuple[tuple[int, int], ...], int]
Lattice = tuple[Pattern, int] | None
#: partitions p0..p1 and bytes b0..b1 (within a partition on chip), and the lattice
Region = tuple[int, int, int, int, Lattice]
#: (entries of a tile, the region accessed, is_write, the tile is on chip)
Access = tuple[list[list[Any]], Region, bool, bool]


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


#: (shape, strides, itemsize, first) -> `_shape_facts`: views of one shape and strides
#: recur at every loop iteration, so their geometry is worked out once per process.
_FACTS: dict[tuple[Any, ...], tuple[int, Pattern | None, int]] = {}
_FACTS_KEPT = 4096


def _shape_facts(shape: tuple[int, ...], strides: tuple[int, ...], item: int, first: int
                 ) -> tuple[int, Pattern | None, int]:
    """(bytes spanned by the dims from `first` on, minus one element's; their nesting
    pattern, or None when the strides do not nest; the offset of their lowest element
    from the first one's, below zero for reversed dims)."""
    key = (shape, strides, item, first)
    found = _FACTS.get(key)
    if found is not None:
        return found
    moving = [(s, n) for s, n in zip(strides[first:], shape[first:], strict=True) if n > 1]
    span = sum((n - 1) * abs(s) for s, n in zip(strides[first:], shape[first:], strict=True))
    dims = sorted(((abs(s), n) for s, n in moving), reverse=True)
    low = sum(s * (n - 1) for s, n in moving if s < 0)  # a reversed dim's lowest end
    inner = item
    pattern: Pattern | None = (tuple(dims), item)
    for s, n in reversed(dims):
        if s < inner:
            pattern = None
            break
        inner = s * n
    if len(_FACTS) >= _FACTS_KEPT:
        _FACTS.clear()
    found = _FACTS[key] = (span, pattern, low)
    return found


def _disjoint(a: Lattice, b: Lattice) -> bool:
    """True when views of one pattern share no element (None: unknown, so False)."""
    if a is None or b is None or a[0] != b[0]:
        return False
    dims, item = a[0]
    return not _hits(dims, 0, b[1] - a[1], item)


def _hits(dims: tuple[tuple[int, int], ...], i: int, d: int, item: int) -> bool:
    """Whether some k_j in (-n_j, n_j) make |d - sum k_j s_j| < item (nested strides: at
    each level only the two multiples of s_i around d can leave a reachable rest)."""
    if i == len(dims):
        return -item < d < item
    s, n = dims[i]
    q = d // s
    return any(-n < k < n and _hits(dims, i + 1, d - k * s, item) for k in (q, q + 1))


class _Tile:
    """What the recorder keeps per allocation: its base address and access entries."""

    __slots__ = ("addr", "entries", "on_chip", "row")

    def __init__(self, base: np.ndarray[Any, Any], on_chip: bool) -> None:
        self.addr = _address(base)
        self.row = base.strides[0] if base.ndim else 0
        self.on_chip = on_chip
        #: [p0, p1, b0, b1, is_write, end_ns, instruction index, (p0, p1, b0, b1)]
        self.entries: list[list[Any]] = []

    def region(self, arr: np.ndarray[Any, Any]) -> Region:
        """(p0, p1, b0, b1) of a view `arr` of this allocation: partitions and bytes within
        a partition (HBM: one partition)."""
        off = _address(arr) - self.addr
        shape, strides = arr.shape, arr.strides
        if self.on_chip:
            row = self.row
            if shape and row and strides[0] == row:
                span, pattern, low = _shape_facts(shape, strides, arr.itemsize, 1)
                p0, b0 = divmod(off, row)
                b0 += low  # a reversed dim's view starts at its last byte: the box starts lower
                return p0, p0 + shape[0], b0, b0 + span + arr.itemsize, (
                    None if pattern is None else (pattern, b0))
            return 0, 1 << 30, 0, 1 << 62, None
        span, pattern, low = _shape_facts(shape, strides, arr.itemsize, 0)
        off += low
        return 0, 1, off, off + span + arr.itemsize, None if pattern is None else (pattern, off)


class Recorder:
    """Fed by the issue hook; `report()` turns what it saw into figures."""

    def __init__(self, target: C.Target, knobs: M.Knobs | None = None) -> None:
        self.target, self.knobs = target, knobs or M.Knobs()
        self.depth = 0
        self.cores = 1
        #: The logical core issuing now (LNC2 program id), and the other cores' model state.
        self.pid = 0
        self.saved: dict[int, tuple[Any, ...]] = {}
        self.lines = {r: Timeline() for r in (*ENGINES, "sbuf_port", "psum_port")}
        self.busy = dict.fromkeys((*ENGINES, "dma"), 0.0)
        self.count_by = dict.fromkeys((*ENGINES, "dma"), 0)
        self.dma_pool = Pool(DMA_GAPS_KEPT)  # the 16 queues' busy time (timeline.Pool)
        self.last: dict[str, int] = {}
        #: This recorder's current core: an allocation's and a view's cached records
        #: (`Allocation.cost`, `Handle.cost`) are valid only for the core that made them.
        self.core = object()
        self.path: list[tuple[str, float, float, int]] = []  # engine, start, end, pred
        self.makespan = 0.0
        #: Instructions removed as dead code (`Knobs.dead_code`, deadcode.py).
        self.eliminated = 0
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
        #: Instructions taken but not yet placed (`finish`): (engine, op, accesses, costs,
        #: never dead code).
        self._queue: list[Item] = []
        self._stateful = False
        self.vec = Vectorizer(self._issue, C.VECTORIZE_MAX_FREE, self.knobs.loop_vectorize)
        #: On-chip allocations announced since the last `finish` (liveness.py), each
        #: site's rotating buffers, and what was spilled: "tile" -> [bytes, times].
        self._allocs: list[Alloc] = []
        self.slots: dict[tuple[Any, ...], list[Any]] = {}
        self.placed = 0
        self.spill_bytes = 0.0
        #: Bytes re-read from HBM for spilled tiles that were copies of HBM data (refills).
        self.refill_bytes = 0.0
        self.spilled: dict[str, list[float]] = {}
        #: Loop tiles given one buffer, not `Knobs.loop_buffers`: both would not fit.
        self.single: list[str] = []

    # ---- affine loops (the legacy compiler's loop vectorization, vectorize.py) --------
    def loop_enter(self, trip: int) -> None:
        self.vec.enter(trip)

    def loop_next(self) -> None:
        self.vec.next()

    def loop_exit(self) -> None:
        self.vec.exit()

    def switch_core(self, pid: int) -> None:
        """Logical core `pid` (LNC2) issues next: each core has its own engines, queues,
        loop buffer and cached tile records (`self.core`), and a core seen for the first
        time starts at time 0. Cores switch only at core_barrier / sendrecv or when one
        finishes (`nkibot.sim.lnc`); the model does not make a barrier wait for the other
        core's clock. What the current core issued is placed first (`finish`)."""
        if pid == self.pid:
            return
        self.finish()
        self.saved[self.pid] = (self.lines, self.dma_pool, self.last, self.core, self.vec)
        if pid in self.saved:
            self.lines, self.dma_pool, self.last, self.core, self.vec = self.saved.pop(pid)
        else:
            self.cores += 1
            self.lines = {r: Timeline() for r in self.lines}
            self.dma_pool = Pool(DMA_GAPS_KEPT)
            self.last, self.core = {}, object()
            self.vec = Vectorizer(self._issue, C.VECTORIZE_MAX_FREE, self.knobs.loop_vectorize)
        self.pid = pid

    # ---- the hook ---------------------------------------------------------------------
    def allocated(self, alloc: Any, site: tuple[str, int], nbytes: int, psum: bool,
                  parts: int, name: str) -> None:
        """The simulator made an on-chip allocation at kernel line `site` (`nbytes` per
        partition): its liveness, rotation and spills are modelled (liveness.py)."""
        tile = _Tile(alloc.base, True)
        alloc.cost = (self.core, tile)
        self._allocs.append(Alloc((self.core, *site), nbytes, parts, psum, name, tile.entries))

    def begin(self, op: str, reads: list[NkiTensor], writes: list[NkiTensor],
              stateful: bool = False) -> None:
        """An instruction starts; `stateful`: it also reads or writes state the hook does
        not see as tiles (accumulation registers, RNG), so it is never dead code."""
        self.depth += 1
        self._op = op
        self._reads = reads
        self._writes = writes
        self._stateful = stateful
        self._pending = []

    def count(self, engine: str, elements: int) -> None:
        if self.depth:
            self._pending.append((engine, elements))
        else:  # an instruction outside any traced call (tile[...] = x): no operands
            self.issue(engine, "unknown", [], [], stateful=True)

    def end(self, results: list[NkiTensor]) -> None:
        writes = self._writes  # the hook's own list: returned tiles join it
        for t in results:
            for w in writes:
                if t is w:
                    break
            else:
                writes = [*writes, t]
        for engine, _ in self._pending:
            self.issue(engine, self._op, self._reads, writes, self._stateful)
        # drop the operands: a list holding a tile keeps the simulator from recycling it
        # (alloc.supersede), which would make a run with the model on refuse a kernel
        self._pending, self._reads, self._writes = [], [], []

    # ---- scheduling -------------------------------------------------------------------
    def _access(self, reads: list[NkiTensor], writes: list[NkiTensor]) -> list[Access]:
        """(entries of the tile, region, is_write, on chip) per operand.

        A view's tile and region are fixed, so they are computed once per view and kept
        in its handle (`Handle.cost`: this core's tile table, the tile's entries, the
        region, the contiguous run); the hook is the model's hottest path.
        """
        out = []
        core = self.core
        for is_write, group in ((False, reads), (True, writes)):
            for t in group:
                h = handle(t)
                geom = h.cost
                if geom is None or geom[0] is not core:
                    geom = h.cost = self._geometry(t, h)
                out.append((geom[1], geom[2], is_write, geom[5]))
                if geom[6] is not None and not is_write:
                    out.append(self._broadcast(t, geom))
        return out

    def _broadcast(self, t: NkiTensor, geom: list[Any]) -> Access:
        """A read of a view that broadcasts one partition to many (`tile.broadcast_to`).

        ARCH1:201-203: "NKI invokes such matmul under the hood when
        broadcast_input.broadcast_to((M, ...)) is called", the same TensorE matmul as
        `nl.broadcast_to` (`issue`). So the view costs one matmul, charged once per view
        (its first reader; later readers of the same view reuse the result), and its
        readers wait for it: the returned access reads the matmul's result.
        """
        result = geom[6]
        if not result[1]:
            result[1] = True
            src = (geom[1], geom[2], False, True)
            dst = (result[0], _WHOLE, True, True)
            self._queue.append(("tensor", "broadcast_to", [[src, dst]],
                                M.matmul(self.target, [t], [t], "broadcast_to"), False))
        return (result[0], _WHOLE, False, True)

    def _geometry(self, t: NkiTensor, h: Any) -> list[Any]:
        """[this core, the tile's entries, the view's region, its contiguous run (0: not
        computed yet), its `model.operand` facts (None: not yet), on chip, a partition
        broadcast view's matmul record (`_broadcast`; None: not one)]."""
        alloc = h.alloc
        kept = alloc.cost  # (core, _Tile): the allocation's record on this core
        if kept is None or kept[0] is not self.core:
            kept = alloc.cost = (self.core, _Tile(alloc.base, t.buffer in ON_CHIP))
        tile = kept[1]
        arr = h.arr
        # a partition broadcast view: [its matmul result's entries, charged yet]
        bcast: list[Any] | None = ([[], False] if (tile.on_chip and arr.ndim and arr.shape[0] > 1
                                                  and arr.strides[0] == 0) else None)
        return [self.core, tile.entries, tile.region(arr), 0, None, tile.on_chip, bcast]

    @staticmethod
    def _run(t: NkiTensor) -> int:
        """The view's contiguous run, kept beside its region (0: not computed yet)."""
        geom = handle(t).cost
        if geom is None:
            return M.contiguous_bytes(t)
        if not geom[3]:
            geom[3] = M.contiguous_bytes(t)
        run: int = geom[3]
        return run

    @staticmethod
    def _operand(t: NkiTensor) -> M.Operand:
        """The view's `model.operand` facts, kept beside its region (None: not yet)."""
        geom = handle(t).cost
        if geom is None:
            return M.operand(t)
        if geom[4] is None:
            geom[4] = M.operand(t)
        got: M.Operand = geom[4]
        return got

    @staticmethod
    def _ready(access: list[Access]) -> tuple[float, int]:
        ready, pred = 0.0, -1
        for entries, (p0, p1, b0, b1, lat), is_write, _ in access:
            for e in entries:
                if (e[5] > ready and (is_write or e[4]) and e[0] < p1 and p0 < e[1]
                        and e[2] < b1 and b0 < e[3] and not _disjoint(lat, e[7][4])):
                    ready, pred = e[5], e[6]
        return ready, pred

    @staticmethod
    def _record(access: list[Access], end: float, idx: int) -> None:
        """Entries: [p0, p1, b0, b1, is_write, end, instruction, region]."""
        for entries, r, is_write, _ in access:
            if is_write:
                q0, q1, c0, c1, _lat = r
                entries[:] = [e for e in entries
                              if not (q0 <= e[0] and e[1] <= q1 and c0 <= e[2] and e[3] <= c1)]
            else:
                for e in entries:
                    if not e[4] and e[7] == r:  # a tile read again: one entry, the latest
                        if end > e[5]:
                            e[5], e[6] = end, idx
                        break
                else:
                    entries.append([*r[:4], False, end, idx, r])
                    if len(entries) > _MAX_ENTRIES:
                        del entries[: _MAX_ENTRIES // 2]
                continue
            entries.append([*r[:4], True, end, idx, r])
            if len(entries) > _MAX_ENTRIES:
                del entries[: _MAX_ENTRIES // 2]

    def issue(self, engine: str, op: str, reads: list[NkiTensor],
              writes: list[NkiTensor], stateful: bool = False) -> None:
        if (op == "broadcast_to" and reads and writes
                and writes[0].shape[0] > reads[0].shape[0]):
            engine = "tensor"  # ARCH1:201-203: NKI broadcasts partitions with a matmul
        if self.vec.frames and self.vec.offer(engine, op, reads, writes, pure=not stateful):
            return  # buffered by an affine loop that may be vectorised
        self._issue(engine, op, [(reads, writes)], stateful)

    def _issue(self, engine: str, op: str, members: list[Member], keep: bool = False) -> None:
        """Take one instruction covering `members` (several: a vectorised loop body).

        What it needs of its tensors (regions, sizes, costs) is read now; placing it on
        the timelines waits for `finish` (the queue is placed in program order, so the
        result is the same), which keeps the simulator's own work and the scheduling
        apart: the per-instruction cost is then a fraction of what it was interleaved.
        """
        reads, writes = members[0]
        if len(members) == 1:
            accesses = [self._access(reads, writes)]
        else:
            accesses = [self._access(r, w) for r, w in members]
        t = self.target
        if engine == "dma":
            info: tuple[Any, ...] = M.dma(t, reads, writes, self.knobs, self._run)
        elif engine == "tensor":
            info = M.matmul(t, reads, writes, op)
        else:
            op_of = self._operand
            info = (*M.elementwise_parts(t, engine,
                                         [op_of(x) for x in reads if x.buffer in ON_CHIP],
                                         [op_of(x) for x in writes if x.buffer in ON_CHIP],
                                         self.knobs, len(members)),
                    self._ports(engine, reads + writes))
        self._queue.append((engine, op, accesses, info, keep))

    def finish(self) -> None:
        """Place every instruction taken since the last call, in program order."""
        queue, self._queue = self._queue, []
        if self.knobs.dead_code:
            kept = live(queue)
            self.eliminated += len(queue) - len(kept)
            queue = kept
        allocs, self._allocs = self._allocs, []
        if allocs:
            queue = allocator.apply(self, queue, allocs)
        for engine, op, accesses, info, _ in queue:
            self._place(engine, op, accesses, info)

    def _place(self, engine: str, op: str, accesses: list[list[Access]],
               info: tuple[Any, ...]) -> None:
        if len(accesses) == 1:
            ready, pred = self._ready(accesses[0])
        else:
            # the latest-ready member sets the start (the first of equals, as program order)
            ready, pred = max((self._ready(a) for a in accesses), key=lambda rp: rp[0])
        if engine == "dma":
            start, end = self._dma(ready, info[0], info[1], info[2])
        else:
            start, end, pred = self._compute(engine, op, ready, pred, info)
        idx = len(self.path)
        self.path.append((engine, start, end, pred))
        for a in accesses:
            self._record(a, end, idx)
        if end > self.makespan:
            self.makespan = end

    def _compute(self, engine: str, op: str, ready: float, pred: int,
                 info: tuple[Any, ...]) -> tuple[float, float, int]:
        if engine == "tensor":
            dur, flops, fp32 = info
            self.flops["fp32" if fp32 else "bf16"] += flops
            ports: tuple[str, ...] = ()
        else:
            dur, streaming, dependent, ports = info
        prev = self.last.get(engine, -1)
        if prev >= 0 and pred == prev and engine != "tensor":
            # ARCH1:403: no back-to-back overlap; the static overhead is added to the
            # streaming estimate, not to the access minimum as well (model.elementwise_parts)
            dur = max(dur, streaming + dependent)
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

    def _dma(self, ready: float, nbytes: float, lanes: int, run: int) -> tuple[float, float]:
        t, k = self.target, self.knobs
        per = M.dma_queue_ns(t, nbytes / lanes, run, k)
        occupancy = per * lanes / t.dma_queues
        start, last = self.dma_pool.fill(ready, occupancy)
        end = max(last, ready + per)
        self.busy["dma"] += per * lanes / t.dma_queues
        self.count_by["dma"] += 1
        self.dma_bytes += nbytes
        self.dma_transfers += 1
        self.dma_ideal_ns += nbytes / (t.dma_queue_bw * t.dma_queues)
        return start, end + k.dma_fixed_ns  # DMA:41 the fixed latency delays the consumer
