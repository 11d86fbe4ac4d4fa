"""The runner respects a human's push: the kernel is verified, the branch is left alone."""

from __future__ import annotations

from nkibot.config.settings import Settings
from tests.fakes.github import GitHubDouble
from tests.runner.test_worker import REPO, drain, enqueue, make_job, runner_for, seed

BRANCH = "nki/src-norm-rmsnorm"


class TestHumanPush:
    def test_reply_says_the_branch_was_left_alone(self, github_double: GitHubDouble,
                                                  github_settings: Settings) -> None:
        """A job whose nki/ branch carries a human commit publishes nothing and says why."""
        sha = seed(github_double)
        github_double.repo(REPO).refs[f"heads/{BRANCH}"] = sha
        human = github_double.commit(REPO, {"notes.md": "mine\n"}, branch=BRANCH,
                                     message="my own experiment")
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha))
        drain(runner)
        repo = github_double.repo(REPO)
        assert repo.refs[f"heads/{BRANCH}"] == human and repo.pulls == {}
        (reply,) = [c["body"] for c in github_double.comments_on(REPO, 5)]
        assert "Someone else has pushed" in reply and BRANCH in reply
        (run,) = github_double.check_runs_of(REPO)
        assert run["conclusion"] == "success"  # the kernel was verified; only publishing held
