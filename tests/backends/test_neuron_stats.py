"""Latency statistics by nearest rank, and speedup arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nkibot.backends.neuron.stats import (
    latency_from_samples,
    ms_to_us,
    nearest_rank,
    ns_to_us,
    speedup,
)
from nkibot.results import Latency


class TestNearestRank:
    def test_known_values(self) -> None:
        """p50 of 1..100 is 50 and p99 is 99 (nearest rank, 1-based)."""
        samples = [float(i) for i in range(1, 101)]
        assert nearest_rank(samples, 50) == 50.0
        assert nearest_rank(samples, 99) == 99.0
        assert nearest_rank(samples, 100) == 100.0

    def test_small_sample(self) -> None:
        """With 3 samples the median is the 2nd and p99 is the largest."""
        assert nearest_rank([1.0, 2.0, 10.0], 50) == 2.0
        assert nearest_rank([1.0, 2.0, 10.0], 99) == 10.0

    def test_rejects_empty_and_bad_q(self) -> None:
        """No samples or a percentile outside (0, 100] is an error."""
        with pytest.raises(ValueError):
            nearest_rank([], 50)
        with pytest.raises(ValueError):
            nearest_rank([1.0], 0)

    @given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
    def test_result_is_an_observed_sample(self, samples: list[float]) -> None:
        """Every reported percentile is one of the measured samples, ordered p50 <= p99."""
        lat = latency_from_samples(samples)
        assert lat.p50_us in samples and lat.p99_us in samples
        assert lat.min_us <= lat.p50_us <= lat.p99_us <= lat.max_us


class TestLatencyFromSamples:
    def test_outlier_moves_max_not_p50(self) -> None:
        """One slow iteration in 100 shows in max and mean but not in p50 or p99."""
        samples = [10.0] * 99 + [1000.0]
        lat = latency_from_samples(samples)
        assert (lat.p50_us, lat.p99_us, lat.max_us) == (10.0, 10.0, 1000.0)
        assert lat.mean_us == pytest.approx(19.9)
        assert lat.iterations == 100

    def test_rejects_nan(self) -> None:
        """A NaN timing is a measurement bug, not a latency."""
        with pytest.raises(ValueError):
            latency_from_samples([1.0, float("nan")])

    def test_unit_conversions(self) -> None:
        """Milliseconds and nanoseconds convert to microseconds."""
        assert ms_to_us([0.5]) == [500.0]
        assert ns_to_us([2500]) == [2.5]


def _lat(p50: float) -> Latency:
    return Latency(p50_us=p50, p99_us=p50, mean_us=p50, min_us=p50, max_us=p50, iterations=1)


class TestSpeedup:
    def test_ratio_of_medians(self) -> None:
        """A 300 µs baseline against a 100 µs kernel is a 3x speedup; slower is below 1."""
        assert speedup(_lat(300), _lat(100)) == pytest.approx(3.0)
        assert speedup(_lat(50), _lat(100)) == pytest.approx(0.5)

    def test_missing_figures_give_none(self) -> None:
        """No baseline, no kernel, or a zero kernel latency gives no speedup."""
        assert speedup(None, _lat(1)) is None
        assert speedup(_lat(1), None) is None
        assert speedup(_lat(1), _lat(0)) is None
