"""The Trainium generation flows from `.github/nki-bot.yml` to the published check run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nkibot.config.settings import Settings
from tests.e2e.conftest import REPO, Stack, repo_files, serve_stack
from tests.fakes.github import GitHubDouble

TARGET = "src/models/norm.py::RMSNorm"


@pytest.fixture
def trn2_stack(github_double: GitHubDouble, github_settings: Settings) -> Iterator[Stack]:
    """The seeded repository with `target: trn2` in its config."""
    config = repo_files()[".github/nki-bot.yml"]
    text = config.decode() if isinstance(config, bytes) else config
    yield from serve_stack(github_double, github_settings, text.rstrip("\n") + "\ntarget: trn2\n")


class TestTargetFlow:
    def test_repo_target_reaches_check_run_pr_and_kernel(self, trn2_stack: Stack) -> None:
        """`target: trn2` -> Job -> simulator rules -> check run, PR body, kernel header."""
        stack = trn2_stack
        status, _ = stack.comment(f"/nki convert {TARGET}")
        assert status == 202
        assert stack.dispatch() == 1
        stack.run_jobs()
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success"
        assert "checked for: trn2 (NeuronCore-v3)" in run["output"]["summary"]
        (pr,) = stack.pulls()
        assert "checked for: trn2 (NeuronCore-v3)" in pr.body
        kernel = stack.github.files_at(REPO, "nki/src-models-norm-rmsnorm")[
            "nki_kernels/norm_rms_norm_nki.py"].decode()
        assert "# checked for: trn2 (NeuronCore-v3)" in kernel

    def test_runner_setting_applies_without_repo_target(self, stack: Stack) -> None:
        """No `target:` in the repo: the runner's NKIBOT_TARGET decides (here trn3)."""
        stack.comment(f"/nki convert {TARGET}")
        stack.dispatch()
        stack.run_jobs(target="trn3")
        (run,) = stack.check_runs()
        assert "checked for: trn3 (NeuronCore-v4)" in run["output"]["summary"]
