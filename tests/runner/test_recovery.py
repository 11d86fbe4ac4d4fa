"""Recovery from a runner killed with SIGKILL: short leases, a heartbeat, a minute at most."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.config.settings import Settings
from tests.fakes.github import GitHubDouble
from tests.runner.recovery import measure

pytestmark = pytest.mark.slow
LEASE_S, BEAT_S = 3.0, 1.0


class TestRecovery:
    def test_sigkilled_runner_costs_its_job_one_lease(
            self, github_double: GitHubDouble, github_settings: Settings,
            tmp_path: Path) -> None:
        """A job held past its lease by the heartbeat runs again one lease after SIGKILL."""
        got = measure(github_double, github_settings, tmp_path, lease_s=LEASE_S, beat_s=BEAT_S,
                      hold_s=LEASE_S * 2)
        assert got.held_s >= LEASE_S * 2  # alive: the heartbeat kept the lease
        # The last beat was at most BEAT_S before the kill; the survivor polls every 0.1 s.
        assert LEASE_S - BEAT_S - 0.5 <= got.seconds <= LEASE_S + 1.5, got
        assert (got.conclusion, got.pulls, got.attempts) == ("success", 1, 2), got


class TestSettings:
    def test_heartbeat_must_beat_inside_the_lease(self) -> None:
        """A heartbeat as long as the lease would let leases lapse under a live runner."""
        with pytest.raises(ValueError, match="shorter than NKIBOT_LEASE_SECONDS"):
            Settings(_env_file=None, lease_seconds=10, lease_heartbeat_s=10)  # type: ignore[call-arg]

    def test_production_defaults_recover_within_a_minute(self) -> None:
        """Defaults: 30 s lease, 10 s beat; a dead runner's job waits at most 30 s + a poll."""
        s = Settings(_env_file=None)  # type: ignore[call-arg]
        assert (s.lease_seconds, s.heartbeat_seconds()) == (30.0, 10.0)
        short = Settings(_env_file=None, lease_seconds=3)  # type: ignore[call-arg]
        assert short.heartbeat_seconds() == 1.0  # a shorter lease beats faster by itself
