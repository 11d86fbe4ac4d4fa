"""Dashboard rows from conversion results: verdict, links, and where a time came from."""

from __future__ import annotations

from nkibot.github.dashboard import result_update, time_of
from nkibot.jobs.model import Job, Trigger
from tests.github.sample_results import hardware, simulated

JOB = Job(id="j1", repo="acme/models", installation_id=7, target="src/a.py::A", sha="a" * 40,
          trigger=Trigger(kind="dashboard", delivery_id="d", sender="alice", issue_number=5))


class TestResultUpdate:
    def test_hardware_times_name_their_source(self) -> None:
        """A hardware result shows the kernel's p50 and ranks by the PyTorch reference's."""
        result = hardware()
        update = result_update(JOB, result, pr_url="https://x/pull/3", check_run_url="https://c")
        assert update.status == "verified" and update.pr_url == "https://x/pull/3"
        assert update.time is not None and "µs p50" in update.time
        assert result.profile is not None and result.profile.torch_device is not None
        assert update.time_us == result.profile.torch_device.p50_us

    def test_simulator_without_a_model_estimate_claims_no_time(self) -> None:
        """A simulated run with no cost-model figure leaves the time empty."""
        result = simulated()
        assert time_of(result.profile) == (None, None)
        assert result_update(JOB, result, pr_url=None, check_run_url=None).time is None

    def test_model_estimate_is_labelled(self) -> None:
        """A cost-model figure in the simulator's stats is shown as a model estimate."""
        profile = simulated().profile
        assert profile is not None
        profile = profile.model_copy(update={"sim_stats": {"estimated_us": 12.5}})
        assert time_of(profile) == ("12.5 µs (model estimate)", 12.5)
