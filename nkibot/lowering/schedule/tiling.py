"""Tile and loop-order choice: candidates scored by a pluggable scorer.

A `Candidate` describes one way to run an operator (loop order, tile sizes, what stays
resident in SBUF) with the traffic and engine work it implies; a `Scorer` turns that into
a modelled cost and the lowest wins. The default scorer is a documented proxy built from
the simulator's own stats vocabulary: DMA bytes moved plus Tensor Engine transposes
(each weighted as one 128 x 128 fp32 block of traffic). The cost model
(`nkibot.sim.cost`) measures a whole kernel, so scoring by it means running each candidate
kernel, and that must happen in the sandbox like any kernel run. So the proxy picks the
first kernel, and every other candidate that fits becomes a *variant* (`Lowered.variants`):
the agent loop's optimize phase verifies and times each with the cost model (or on the
device) and keeps it only when it verifies and is faster (`nkibot.convert.agent.optimize`).
The convolution emitters choose their folds and bands the same way, before any kernel
runs, by closed-form estimates restated from the cost model's trn1 constants
(`convfold`, `convband`). docs/cost-model.md ("How tilings are picked") says the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

PMAX = 128  # nl.tile_size.pmax: partitions per tile

TRANSPOSE_BYTES = 128 * 128 * 4  # a PE transpose costs about one fp32 block of DMA


@dataclass(frozen=True)
class Candidate:
    """One way to run an operator and the work it implies."""

    name: str
    dma_bytes: int
    transposes: int = 0
    sbuf_bytes_per_partition: int = 0


Scorer = Callable[[Candidate], float]


def dma_proxy(c: Candidate) -> float:
    """Modelled cost: DMA bytes plus PE transposes at one block each (proxy, not a latency)."""
    return float(c.dma_bytes + c.transposes * TRANSPOSE_BYTES)


SCORER_NAME = "a traffic proxy: DMA bytes plus PE transposes at one fp32 block each"


def choose(candidates: Sequence[Candidate], budget: int, scorer: Scorer = dma_proxy,
           forced: str | None = None) -> Candidate:
    """The best candidate whose SBUF footprint fits `budget` bytes per partition, or the
    fitting one named `forced` (a variant the agent loop times with the cost model)."""
    fitting = [c for c in candidates if c.sbuf_bytes_per_partition <= budget]
    if not fitting:
        raise ValueError("no tiling candidate fits SBUF")
    named = [c for c in fitting if c.name == forced]
    return named[0] if named else min(fitting, key=scorer)


def others(candidates: Sequence[Candidate], budget: int, chosen: Candidate) -> list[str]:
    """The names of the fitting candidates not chosen: the variants worth timing."""
    return [c.name for c in candidates
            if c.sbuf_bytes_per_partition <= budget and c.name != chosen.name]
