"""Tile and loop-order choice: candidates scored by a pluggable scorer.

A `Candidate` describes one way to run an operator (loop order, tile sizes, what stays
resident in SBUF) with the traffic and engine work it implies; a `Scorer` turns that into
a modelled cost and the lowest wins. The default scorer is a documented proxy built from
the simulator's own stats vocabulary: DMA bytes moved plus Tensor Engine transposes
(each weighted as one 128 x 128 fp32 block of traffic). The cost model
(`nkibot.sim.cost`) measures a whole kernel, so scoring by it means running each candidate
kernel, and that must happen in the sandbox like any kernel run; a scorer over its
estimate can replace `dma_proxy` without touching the emitters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


def choose(candidates: Sequence[Candidate], budget: int, scorer: Scorer = dma_proxy
           ) -> Candidate:
    """The best candidate whose SBUF footprint fits `budget` bytes per partition."""
    fitting = [c for c in candidates if c.sbuf_bytes_per_partition <= budget]
    if not fitting:
        raise ValueError("no tiling candidate fits SBUF")
    return min(fitting, key=scorer)
