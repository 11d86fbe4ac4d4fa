"""The runner's check run and reply against the GitHub double: batching and idempotency."""

from __future__ import annotations

import asyncio

from nkibot.config.settings import Settings
from nkibot.github.checks import CheckRun, actions_for, reply_once
from nkibot.github.client import installation_client
from nkibot.github.gateway import GitHubGateway, check_run_name, hidden_marker
from nkibot.github.render import check_run_output
from tests.fakes.github import GitHubDouble
from tests.github import sample_results as S
from tests.runner.test_worker import INSTALLATION, REPO, make_job, seed


class TestCheckRun:
    def test_annotations_go_out_fifty_at_a_time(self, github_double: GitHubDouble,
                                               github_settings: Settings) -> None:
        """120 diagnostics become one completing request and two more updates of <= 50."""
        sha = seed(github_double)
        gw = GitHubGateway(installation_client(github_settings, INSTALLATION))
        run = CheckRun(gw, make_job(sha))
        output = check_run_output(S.compile_failed(120), line_offset=9)
        asyncio.run(run.complete("failure", output))
        (stored,) = github_double.check_runs_of(REPO)
        sizes = [len((u.get("output") or {}).get("annotations", [])) for u in stored["updates"]]
        assert sizes == [0, 50, 50, 20]  # create, then complete + two batches
        assert len(stored["annotations"]) == 120 and stored["conclusion"] == "failure"
        assert stored["annotations"][0]["start_line"] == 10

    def test_a_new_attempt_finds_its_check_run(self, github_double: GitHubDouble,
                                               github_settings: Settings) -> None:
        """A job without a check run id reuses the run an earlier attempt created."""
        sha = seed(github_double)
        gh = GitHubGateway(installation_client(github_settings, INSTALLATION))
        first = asyncio.run(CheckRun(gh, make_job(sha)).ensure())
        again = asyncio.run(CheckRun(gh, make_job(sha)).ensure())
        assert first == again and len(github_double.check_runs_of(REPO)) == 1

    def test_actions_offer_reprofile_only_with_a_kernel(self) -> None:
        """Retry and Retry +5 turns always; Re-profile only after success."""
        assert [a["identifier"] for a in actions_for("failure")] == ["retry", "retry_more_turns"]
        assert [a["label"] for a in actions_for("success")] == ["Retry", "Retry +5 turns",
                                                                "Re-profile"]
        assert all(len(a["label"]) <= 20 and len(a["description"]) <= 40
                   for a in actions_for("success"))


class TestReply:
    def test_reply_is_posted_once_per_job(self, github_double: GitHubDouble,
                                          github_settings: Settings) -> None:
        """A repeated reply (a restarted job) finds its marker and posts nothing."""
        sha = seed(github_double)
        gh = GitHubGateway(installation_client(github_settings, INSTALLATION))
        job = make_job(sha)
        assert asyncio.run(reply_once(gh, job, "done"))
        assert not asyncio.run(reply_once(gh, job, "done"))
        (comment,) = github_double.comments_on(REPO, 5)
        assert comment["body"].startswith("done\n\n<!-- nkibot:job:j1 -->")


class TestOneScheme:
    def test_one_name_and_one_marker_scheme(self) -> None:
        """Check runs are named `nkibot: <target>`; markers are `<!-- nkibot:... -->`."""
        assert check_run_name("src/a.py::A") == "nkibot: src/a.py::A"
        assert hidden_marker("job", "j1") == "<!-- nkibot:job:j1 -->"

    def test_the_dispatchers_run_is_the_runners_run(self, github_double: GitHubDouble,
                                                    github_settings: Settings) -> None:
        """A run the gateway created under the one name is found by the runner's CheckRun."""
        sha = seed(github_double)
        gw = GitHubGateway(installation_client(github_settings, INSTALLATION))
        job = make_job(sha)
        made = asyncio.run(gw.create_check_run(REPO, sha, check_run_name(job.target), job.id,
                                               "queued"))
        assert asyncio.run(CheckRun(gw, job).ensure()) == made
