"""`CostReport`: the model's figures for one launch, labelled as a model estimate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nkibot.sim.cost.schedule import ENGINES, Recorder


def label(target: str) -> str:
    """The label every modelled figure carries wherever it is shown."""
    return f"model estimate ({target}), not a measurement"


@dataclass(frozen=True)
class CostReport:
    """Modelled device time of one kernel launch (nanoseconds unless named `_us`)."""

    target: str
    makespan_ns: float
    busy_ns: dict[str, float]
    instructions: dict[str, int]
    critical_engine: str
    critical_path_ns: dict[str, float]
    dma_bytes: int
    dma_transfers: int
    dma_efficiency: float  # ideal DMA time at peak bandwidth / modelled DMA busy time
    hbm_bytes: int
    flops: float
    roofline_ns: float
    roofline_bound: str  # "memory" or "compute"
    cost_only: bool = False
    #: "engine:op" -> (instructions, busy ns), the heaviest first.
    by_op: dict[str, tuple[int, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Bytes saved to HBM (and reloaded) where live tiles exceeded SBUF/PSUM
    #: (liveness.py), and per tile (name and kernel line) [bytes, spills].
    spill_bytes: int = 0
    spilled: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Bytes re-read from HBM for tiles evicted while still copies of HBM data (refills:
    #: nothing saved); `spilled` counts them with the spills (bytes reloaded, times).
    refill_bytes: int = 0
    #: Loop tiles given one buffer instead of two (two would not fit): their iterations
    #: serialise.
    single_buffered: list[str] = field(default_factory=list)

    @property
    def makespan_us(self) -> float:
        return self.makespan_ns / 1000.0

    @property
    def roofline_fraction(self) -> float:
        """Roofline lower bound / modelled time (1.0 = at the roofline)."""
        return self.roofline_ns / self.makespan_ns if self.makespan_ns > 0 else 0.0

    @property
    def utilisation(self) -> dict[str, float]:
        """Busy time / makespan per engine (DMA: averaged over its queues)."""
        span = self.makespan_ns or 1.0
        return {e: min(1.0, b / span) for e, b in self.busy_ns.items()}

    @property
    def label(self) -> str:
        return label(self.target)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready; every figure sits under this object's `label`."""
        return {
            "label": self.label,
            "target": self.target,
            "time_us": round(self.makespan_us, 3),
            "busy_us": {e: round(b / 1000.0, 3) for e, b in self.busy_ns.items()},
            "utilisation": {e: round(u, 3) for e, u in self.utilisation.items()},
            "instructions": dict(self.instructions),
            "critical_engine": self.critical_engine,
            "dma_bytes": self.dma_bytes,
            "dma_transfers": self.dma_transfers,
            "dma_efficiency": round(self.dma_efficiency, 3),
            "hbm_bytes": self.hbm_bytes,
            "flops": self.flops,
            "roofline_us": round(self.roofline_ns / 1000.0, 3),
            "roofline_bound": self.roofline_bound,
            "roofline_fraction": round(self.roofline_fraction, 4),
            "cost_only": self.cost_only,
            "top_ops": [{"op": k, "instructions": n, "busy_us": round(ns / 1000.0, 3)}
                        for k, (n, ns) in list(self.by_op.items())[:6]],
            "spill_bytes": self.spill_bytes,
            "refill_bytes": self.refill_bytes,
            "spilled": [{"tile": k, "bytes": b, "reloads": n}
                        for k, (b, n) in list(self.spilled.items())[:6]],
            "single_buffered": self.single_buffered[:6],
        }


def _critical(rec: Recorder) -> dict[str, float]:
    """Time along the chain of binding constraints that ends at the last instruction."""
    per: dict[str, float] = {}
    if not rec.path:
        return per
    i = max(range(len(rec.path)), key=lambda j: rec.path[j][2])
    seen = 0
    while i >= 0 and seen < len(rec.path):
        engine, start, end, pred = rec.path[i]
        per[engine] = per.get(engine, 0.0) + (end - start)
        i, seen = (pred if pred < i else -1), seen + 1
    return per


def build(rec: Recorder, hbm_bytes: int, cost_only: bool) -> CostReport:
    """The report of everything `rec` saw, with the roofline for `hbm_bytes` of I/O."""
    rec.finish()
    t = rec.target
    mem_ns = hbm_bytes / (t.dma_queue_bw * t.dma_queues)
    flops = rec.flops["bf16"] + rec.flops["fp32"]
    fl_ns = rec.flops["bf16"] / (t.bf16_tflops * 1e3) + rec.flops["fp32"] / (t.fp32_tflops * 1e3)
    crit = _critical(rec)
    busy = {e: rec.busy[e] / rec.cores for e in (*ENGINES, "dma")}
    critical = max(crit, key=crit.__getitem__) if crit else max(busy, key=busy.__getitem__)
    dma_busy = rec.busy["dma"] * t.dma_queues
    return CostReport(
        target=t.name, makespan_ns=rec.makespan, busy_ns=busy,
        instructions=dict(rec.count_by), critical_engine=critical, critical_path_ns=crit,
        dma_bytes=int(rec.dma_bytes), dma_transfers=rec.dma_transfers,
        dma_efficiency=(rec.dma_ideal_ns * t.dma_queues / dma_busy) if dma_busy else 1.0,
        hbm_bytes=hbm_bytes, flops=flops, roofline_ns=max(mem_ns, fl_ns),
        roofline_bound="compute" if fl_ns > mem_ns else "memory", cost_only=cost_only,
        by_op={k: (int(v[0]), float(v[1])) for k, v in
               sorted(rec.by_op.items(), key=lambda kv: -kv[1][1])},
        notes=_notes(rec), spill_bytes=int(rec.spill_bytes),
        refill_bytes=int(rec.refill_bytes),
        spilled={k: (int(v[0]), int(v[1])) for k, v in
                 sorted(rec.spilled.items(), key=lambda kv: -kv[1][0])},
        single_buffered=list(rec.single))


def _notes(rec: Recorder) -> list[str]:
    notes = []
    if rec.eliminated:
        notes.append(f"dead-code elimination: {rec.eliminated} instruction(s) whose results "
                     "are never read were not costed")
    if rec.spilled:
        worst = max(rec.spilled.items(), key=lambda kv: kv[1][0])
        notes.append(f"spills: {int(rec.spill_bytes)} bytes saved (SBUF to HBM, PSUM to "
                     "SBUF) and reloaded, "
                     f"{int(rec.refill_bytes)} bytes of HBM copies re-read (refills), where "
                     f"live tiles exceed on-chip capacity; most by {worst[0]} "
                     f"({int(worst[1][0])} bytes in {int(worst[1][1])} reloads)")
    if rec.single:
        notes.append("single-buffered (two buffers would not fit, iterations serialise): "
                     + ", ".join(rec.single[:4]))
    return notes
