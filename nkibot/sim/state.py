"""Per-run state: engine counters, on-chip memory accounting, the LNC program id.

One `RunState` lives for one kernel launch (all its logical cores). Instructions
count into it; `stats()` returns the last finished (or running) launch's counters.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkibot.sim import targets
from nkibot.sim.errors import fail

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
#: trn1's capacities (the other generations' are in targets.RULES).
SBUF_PARTITION_BYTES = 192 * 1024
PSUM_PARTITION_BYTES = 16 * 1024
PSUM_BANK_BYTES = 2 * 1024
#: Launch serial numbers: an allocation names its launch by number, not by reference.
_SERIALS = itertools.count(1)


@dataclass
class Counters:
    instructions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0))
    elements: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0))
    dma_bytes: int = 0
    peak_sbuf_bytes_per_partition: int = 0
    peak_psum_bytes_per_partition: int = 0
    #: Hardware caveats of a run the simulator accepted (e.g. a non-shared_hbm result).
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "instructions": dict(self.instructions),
            "elements": dict(self.elements),
            "dma_bytes": self.dma_bytes,
            "peak_sbuf_bytes_per_partition": self.peak_sbuf_bytes_per_partition,
            "peak_psum_bytes_per_partition": self.peak_psum_bytes_per_partition,
            "notes": list(self.notes),
        }


class MemoryTracker:
    """Live on-chip bytes per partition.

    Model: an allocation is live while any view of it is referenced; CPython frees it the
    moment the last reference goes, which is when the compiler would recycle it too (a
    tile allocated inside a loop body is dead by the next iteration's rebinding). So a
    normal tiled kernel holds about two copies of each loop-body tile at the peak, as a
    double-buffering compiler would. PSUM is handed out in whole 2 KiB banks.
    """

    def __init__(self, counters: Counters, target: str = "trn1") -> None:
        self.sbuf = 0
        self.psum = 0
        self.counters = counters
        self.target = target
        self.sbuf_limit: int = targets.rule("sbuf_partition_bytes", target)
        self.psum_limit: int = targets.rule("psum_partition_bytes", target)

    def take(self, buffer: str, nbytes: int, shape: tuple[int, ...], dtype: object) -> int:
        if buffer == "psum":
            nbytes = -(-nbytes // PSUM_BANK_BYTES) * PSUM_BANK_BYTES
            if self.psum + nbytes > self.psum_limit:
                raise fail(
                    "psum-capacity",
                    f"allocating psum tile {shape} {dtype} ({nbytes} B/partition) with "
                    f"{self.psum} B/partition live exceeds PSUM's {self.psum_limit // 1024} KiB "
                    f"({self.psum_limit // PSUM_BANK_BYTES} banks) per partition on "
                    f"{self.target}",
                )
            self.psum += nbytes
            c = self.counters
            c.peak_psum_bytes_per_partition = max(c.peak_psum_bytes_per_partition, self.psum)
        else:
            if self.sbuf + nbytes > self.sbuf_limit:
                raise fail(
                    "sbuf-capacity",
                    f"allocating sbuf tile {shape} {dtype} ({nbytes} B/partition) with "
                    f"{self.sbuf} B/partition live exceeds SBUF's {self.sbuf_limit // 1024} KiB "
                    f"per partition on {self.target} "
                    f"({targets.RULES['sbuf_partition_bytes'].source})",
                )
            self.sbuf += nbytes
            c = self.counters
            c.peak_sbuf_bytes_per_partition = max(c.peak_sbuf_bytes_per_partition, self.sbuf)
        return nbytes

    def give(self, buffer: str, nbytes: int) -> None:
        if buffer == "psum":
            self.psum -= nbytes
        else:
            self.sbuf -= nbytes


class RunState:
    """Everything one kernel launch shares: counters, memory, program id, shared outputs."""

    def __init__(self, lnc: int = 1, target: str = "trn1") -> None:
        self.counters = Counters()
        self.memory = MemoryTracker(self.counters, target)
        #: This state's number; allocations record their launch's (`launch.serial`), so
        #: that a launch's shared outputs do not point back at it (no cycle to collect).
        self.serial = next(_SERIALS)
        self.lnc = lnc
        self.program = 0
        #: The launch grid (`kernel[4, 2]`); `program` is the flat (C-order) index in it.
        self.grid: tuple[int, ...] = (lnc,) if lnc > 1 else ()
        self.target = target
        #: shared_hbm allocations of program 0, reused by the other programs in order.
        self.shared: list[Any] = []
        self.shared_cursor = 0
        #: Scalar/Vector engine accumulation registers, one per partition.
        self.regs: dict[str, np.ndarray[Any, Any]] = {}
        #: The cost model's recorder (`nkibot.sim.cost`), fed at instruction issue; None
        #: when the model is off, so the only cost then is this attribute test.
        self.cost: Any = None
        #: False in the cost model's cost-only mode: matmul groups are not computed (the
        #: one O(K*M*N) numeric step); every other instruction still runs on NumPy.
        self.numerics = True
        #: Bumped at every iteration of an `nl` loop; with `sites`, the allocation made at
        #: a source line in an earlier iteration (see `alloc.supersede`).
        self.loop_epoch = 0
        self.sites: dict[tuple[str, int], tuple[int, Any]] = {}
        #: Depth of `with nl.no_reorder():` blocks (dynamic loops are refused inside).
        self.no_reorder = 0
        #: For a logical core of an LNC=2 launch, the launch's root state (see `for_core`);
        #: None for the root itself. Not `self`: a self-reference would make every launch
        #: cyclic garbage, holding its shared_hbm outputs until a full collection (at 160 MB
        #: an output, ten trials ran a verification child out of memory).
        self._root: RunState | None = None
        #: The scheduler of an LNC=2 launch's cores (`nkibot.sim.lnc.Cores`), else None.
        self.cores: Any = None

    def for_core(self, pid: int, cores: Any) -> RunState:
        """The state of logical core `pid`: its own SBUF/PSUM, registers and loop sites;
        the launch's counters, shared_hbm tensors, cost recorder and generation."""
        core = RunState(self.lnc, self.target)
        core.counters, core._root, core.cores, core.program = self.counters, self, cores, pid
        core.grid = self.grid
        core.memory = MemoryTracker(self.counters, self.target)
        core.memory.sbuf_limit, core.memory.psum_limit = (self.memory.sbuf_limit,
                                                          self.memory.psum_limit)
        core.shared, core.cost, core.numerics = self.shared, self.cost, self.numerics
        return core

    @property
    def launch(self) -> RunState:
        """The launch this state belongs to: itself, or a logical core's root state."""
        return self._root if self._root is not None else self

    def count(self, engine: str, elements: int) -> None:
        c = self.counters
        c.instructions[engine] += 1
        c.elements[engine] += elements
        if self.cost is not None:
            self.cost.count(engine, elements)


class _Local(threading.local):
    """Per thread: the launch in progress (or a standalone state) and the nesting depth."""

    def __init__(self) -> None:
        self.state = RunState()
        self.depth = 0


LOCAL = _Local()
#: Counters of the last launch started in any thread (what `stats()` reports).
LAST: list[Counters] = [LOCAL.state.counters]


def current() -> RunState:
    return LOCAL.state
