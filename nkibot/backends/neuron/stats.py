"""Latency statistics from raw timings, and the speedup arithmetic against baselines.

Percentiles use the nearest-rank method: the q-th percentile of n sorted samples is the
ceil(q/100 * n)-th smallest sample (1-based). It always returns an observed sample, so a
reported p99 is a latency that really happened; with 100 timed iterations p99 is the
second slowest. Speedup is the ratio of medians (baseline p50 / kernel p50): the median
resists the occasional slow iteration that skews the mean on a shared host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nkibot.results import Latency


def nearest_rank(sorted_samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) of already sorted samples, by nearest rank."""
    if not sorted_samples:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} outside (0, 100]")
    rank = math.ceil(q / 100 * len(sorted_samples))
    return float(sorted_samples[max(rank, 1) - 1])


def latency_from_samples(samples_us: Sequence[float]) -> Latency:
    """p50/p99/mean/min/max in microseconds of the timed iterations (warm-up excluded)."""
    clean = sorted(float(s) for s in samples_us)
    if not clean:
        raise ValueError("no timed iterations")
    if any(not math.isfinite(s) or s < 0 for s in clean):
        raise ValueError("timings must be finite and non-negative")
    return Latency(
        p50_us=nearest_rank(clean, 50),
        p99_us=nearest_rank(clean, 99),
        mean_us=math.fsum(clean) / len(clean),
        min_us=clean[0],
        max_us=clean[-1],
        iterations=len(clean),
    )


def ms_to_us(samples_ms: Sequence[float]) -> list[float]:
    return [float(s) * 1000.0 for s in samples_ms]


def ns_to_us(samples_ns: Sequence[int | float]) -> list[float]:
    return [float(s) / 1000.0 for s in samples_ns]


def speedup(baseline: Latency | None, kernel: Latency | None) -> float | None:
    """How many times faster the kernel's median is than the baseline's; None if unknown."""
    if baseline is None or kernel is None or kernel.p50_us <= 0:
        return None
    return baseline.p50_us / kernel.p50_us
