"""Dashboard rows from conversion results: verdict, links, and where a time came from."""

from __future__ import annotations

import asyncio

from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.github.dashboard import report_row, result_update, time_of
from nkibot.github.gateway import GitHubGateway
from nkibot.jobs.model import Job, Trigger
from tests.fakes.github import GitHubDouble
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


class TestReportRow:
    def test_a_dashboard_job_reports_on_its_row(self, github_double: GitHubDouble,
                                                github_settings: Settings) -> None:
        """report_row (the runner's dashboard reply) rewrites only the job's row of the
        dashboard issue; a job from a comment has no row and changes nothing."""
        from nkibot.handlers.dashboard import Board, Row, RowUpdate, new_issue_body, parse_board
        from tests.runner.test_worker import INSTALLATION, REPO, make_job, seed

        sha = seed(github_double)
        rows = (Row(target="src/norm.py::RMSNorm", kind="nn.Module", status="queued"),
                Row(target="src/b.py::B", kind="nn.Module", status="queued"))
        github_double.add_issue(REPO, 9, title="nkibot dashboard",
                                body=new_issue_body(Board("main", sha, rows)))
        gw = GitHubGateway(installation_client(github_settings, INSTALLATION))
        job = make_job(sha).model_copy(update={"trigger": Trigger(
            kind="dashboard", delivery_id="d", sender="alice", issue_number=9)})
        asyncio.run(report_row(gw, job, RowUpdate(job.target, status="running",
                                                   check_run_url="https://c/1")))
        board = parse_board(github_double.repo(REPO).issues[9]["body"])
        assert board is not None
        mine, other = board.row(job.target), board.row("src/b.py::B")
        assert mine is not None and (mine.status, mine.check_run_url) == ("running",
                                                                          "https://c/1")
        assert other is not None and other.status == "queued"
        untouched = github_double.repo(REPO).issues[9]["body"]
        no_row = job.model_copy(update={"trigger": Trigger(
            kind="comment", delivery_id="e", sender="alice", issue_number=None)})
        asyncio.run(report_row(gw, no_row, RowUpdate(job.target, status="failed")))
        assert github_double.repo(REPO).issues[9]["body"] == untouched
