"""Cost first: the optimize phase ranks every candidate by the cost model before verifying.

A verification runs the candidate on every trial, twice (the determinism pair); the cost
model in cost-only mode (`nkibot.sim.cost.estimate(..., numerics=False)`, in the sandboxed
child) ranks it in a fraction of that. So a candidate is verified only when it is modelled
faster than the best kernel so far by more than the model's tie band, and the lowering's
variants are offered fastest first. A candidate the model ranks slower is answered with
its modelled time and profile, unverified; it could not have been kept anyway, since a
kept kernel must verify and be faster (on hardware: measured faster).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nkibot.backends.base import KernelBackend
from nkibot.results import ProfileResult
from nkibot.sim.cost.explain import allocation
from nkibot.task import Task

#: The cost model's tie band: differences under 5 % are ties, as in its calibration
#: (`bench/perf_calibration.py`, docs/cost-model.md "Calibration").
TIE_BAND = 0.05


def fmt_us(us: float) -> str:
    """12,112 for thousands of µs, 31.9 below (the precision the figure carries)."""
    return f"{us:,.0f}" if us >= 1000 else f"{us:.1f}"


def modelled_us(profile: ProfileResult | None) -> float | None:
    """The cost model's time in a profile or estimate, if it has one."""
    us = profile.model.get("time_us") if profile is not None else None
    return float(us) if isinstance(us, int | float) and us > 0 else None


def skip_reason(candidate_us: float, best_us: float, band: float = TIE_BAND) -> str | None:
    """Why a candidate modelled at `candidate_us` is not verified (None: verify it)."""
    against = f"({fmt_us(candidate_us)} µs against {fmt_us(best_us)} µs)"
    if candidate_us >= best_us:
        return f"not verified: modelled slower {against}"
    if candidate_us > best_us * (1 - band):
        return f"not verified: modelled within the cost model's {band:.0%} tie band {against}"
    return None


def breakdown(profile: ProfileResult) -> str:
    """The model's view of where the time goes, for the prompt."""
    m = profile.model
    if not m or "time_us" not in m:
        return ""
    util = m.get("utilisation")
    busy = ", ".join(f"{k} {100 * float(v):.0f}%" for k, v in util.items()
                     ) if isinstance(util, dict) else ""
    top = m.get("top_ops")
    ops = "; ".join(f"{o['op']} x{o['instructions']} = {o['busy_us']} us"
                    for o in top[:4]) if isinstance(top, list) else ""
    return (f"Bottleneck engine: {m.get('critical_engine')}. Utilisation: {busy}. "
            f"DMA: {m.get('dma_transfers')} transfers, {m.get('dma_bytes')} bytes, "
            f"efficiency {m.get('dma_efficiency')}. Roofline fraction "
            f"{m.get('roofline_fraction')} ({m.get('roofline_bound')}-bound). "
            f"Heaviest instructions: {ops}.{allocation(m)}")


@dataclass(frozen=True)
class Skipped:
    """A candidate not verified because the model ranks it no faster than the best."""

    reason: str
    time_us: float
    profile: ProfileResult


#: Asked before a verification: a Skipped to answer with instead, or None to verify.
Gate = Callable[[str], Awaitable[Skipped | None]]


@dataclass
class Costs:
    """Cost-only estimates of kernel sources, each computed once per conversion."""

    backend: KernelBackend
    task: Task
    _cache: dict[str, ProfileResult | None] = field(default_factory=dict)

    async def of(self, code: str) -> ProfileResult | None:
        """The estimate of `code` (None: the model gave no figure, e.g. it did not trace)."""
        if code not in self._cache:
            try:
                found: ProfileResult | None = await asyncio.to_thread(
                    self.backend.estimate, code, self.task)
            except Exception:  # no estimate only means no skipping: the candidate verifies
                found = None
            self._cache[code] = found if modelled_us(found) is not None else None
        return self._cache[code]

    async def fastest_first(self, sources: list[str]) -> list[str]:
        """`sources` by modelled time, fastest first; those without a figure last."""
        times = [modelled_us(await self.of(s)) for s in sources]
        order = sorted(range(len(sources)), key=lambda i: (times[i] is None, times[i] or 0.0, i))
        return [sources[i] for i in order]


@dataclass
class ModelGate:
    """The gate of one optimize phase: the best kernel's modelled time, updated as it moves."""

    costs: Costs
    best_us: float

    async def __call__(self, code: str) -> Skipped | None:
        profile = await self.costs.of(code)
        us = modelled_us(profile)
        if profile is None or us is None:
            return None  # no figure: the verification's own result says what is wrong
        why = skip_reason(us, self.best_us)
        return None if why is None else Skipped(why, us, profile)
