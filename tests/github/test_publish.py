"""Publishing through the Git Data API to the GitHub double: branch, commit, one PR."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.github.publish import (
    LeftAlone,
    Published,
    Publisher,
    PublishPlan,
    plan_publication,
    pr_base,
)
from nkibot.jobs.model import Job, Trigger
from nkibot.results import ConversionResult
from tests.fakes.github import GitHubDouble
from tests.github import sample_results as S

REPO = "octo/models"
BRANCH = "nki/src-norm-rmsnorm"


def job_for(sha: str, generation: int = 0, **trigger: Any) -> Job:
    fields: dict[str, Any] = {"kind": "comment", "delivery_id": "d1", "sender": "octocat",
                              "issue_number": 5}
    fields.update(trigger)
    return Job(id="j1", repo=REPO, installation_id=3, target="src/norm.py::RMSNorm", sha=sha,
               trigger=Trigger(**fields), generation=generation)


def plan(job: Job, result: ConversionResult | None = None, **kw: Any) -> PublishPlan:
    return plan_publication(job, result or S.simulated(), output_dir="nki_kernels/",
                            reference_path="src/norm.py", entry="RMSNorm", date="2026-01-01",
                            check_run_url="https://github.com/checks/1", **kw)


def publish(settings: Settings, the_plan: PublishPlan, cls: type[Publisher] = Publisher
            ) -> Published:
    out = asyncio.run(cls(installation_client(settings, 3)).publish(the_plan))
    assert isinstance(out, Published), out
    return out


def left_alone(settings: Settings, the_plan: PublishPlan) -> LeftAlone:
    out = asyncio.run(Publisher(installation_client(settings, 3)).publish(the_plan))
    assert isinstance(out, LeftAlone), out
    return out


def seed(double: GitHubDouble) -> str:
    repo = double.add_repo(REPO, {"src/norm.py": "class RMSNorm: ...\n"}, installation_id=3)
    return repo.refs["heads/main"]


class TestPlan:
    def test_files_paths_and_body(self) -> None:
        """The plan holds the kernel and its test under output_dir, and the body closes #5."""
        p = plan(job_for("a" * 40), integrated={"src/norm.py": "patched"})
        assert sorted(p.files) == ["nki_kernels/norm_rms_norm_nki.py",
                                   "nki_kernels/test_norm_rms_norm_nki.py", "src/norm.py"]
        assert "REFERENCE_FILE = HERE / '../src/norm.py'" in p.files[
            "nki_kernels/test_norm_rms_norm_nki.py"]
        assert p.branch == BRANCH and p.base == "main"
        assert "Closes #5" in p.pr_body and "[check run](https://github.com/checks/1)" in p.pr_body

    def test_pr_base_rules(self) -> None:
        """Same-repo PRs target their head branch, forks the base branch, issues the default."""
        same = job_for("a", is_pull_request=True, head_ref="feat", head_repo=REPO,
                       base_ref="dev")
        fork = job_for("a", is_pull_request=True, head_ref="feat", head_repo="someone/models",
                       base_ref="dev")
        assert (pr_base(same), pr_base(fork), pr_base(job_for("a"))) == ("feat", "dev", "main")
        assert "Closes" not in plan(same).pr_body


class TestPublish:
    def test_first_publication_creates_branch_and_pr(self, github_double: GitHubDouble,
                                                      github_settings: Settings) -> None:
        """A new branch off the job's SHA holds the files, and one PR is opened."""
        sha = seed(github_double)
        out = publish(github_settings, plan(job_for(sha)))
        repo = github_double.repo(REPO)
        assert out.created and repo.refs[f"heads/{BRANCH}"] == out.commit_sha
        assert repo.commits[out.commit_sha].parents == [sha]
        files = github_double.files_at(REPO, BRANCH)
        assert files["src/norm.py"] == b"class RMSNorm: ...\n"  # base tree kept
        assert b"# commit: octo/models@" in files["nki_kernels/norm_rms_norm_nki.py"]
        (pr,) = repo.pulls.values()
        assert (pr.head_ref, pr.base_ref) == (BRANCH, "main") and "Closes #5" in pr.body

    def test_retry_updates_branch_and_pr_without_duplicates(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A second publication fast-forwards the branch and edits the same PR."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        again = publish(github_settings, plan(job_for(sha), S.hardware()))
        repo = github_double.repo(REPO)
        assert not again.created and again.pr_number == first.pr_number
        assert repo.commits[again.commit_sha].parents == [first.commit_sha]
        assert len(repo.pulls) == 1 and "Trn1 hardware" in repo.pulls[first.pr_number].body
        assert not any(c.body and c.body.get("force") for c in
                       github_double.calls_to("PATCH", "/git/refs/"))

    def test_same_content_makes_no_new_commit(self, github_double: GitHubDouble,
                                              github_settings: Settings) -> None:
        """Publishing identical files again leaves the branch where it was."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        again = publish(github_settings, plan(job_for(sha)))
        assert again.commit_sha == first.commit_sha
        assert len(github_double.calls_to("POST", "/git/commits")) == 1

    def test_conflict_rebuilds_on_the_new_head(self, github_double: GitHubDouble,
                                               github_settings: Settings) -> None:
        """When another worker moved the branch, the non-forced update fails and it rebuilds."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        moved = publish(github_settings, plan(job_for(sha), S.hardware())).commit_sha

        class Stale(Publisher):
            """Sees the old head once, as if another writer moved the branch meanwhile."""

            calls = 0

            async def _head(self, owner: str, name: str, branch: str) -> str | None:
                Stale.calls += 1
                return first.commit_sha if Stale.calls == 1 else await super()._head(
                    owner, name, branch)

        third = plan(job_for(sha))
        third = dataclasses.replace(third, files={**third.files, "NOTES.md": "third\n"})
        out = publish(github_settings, third, Stale)
        repo = github_double.repo(REPO)
        assert repo.commits[out.commit_sha].parents == [moved]
        assert any(c.status == 422 for c in github_double.calls_to("PATCH", "/git/refs/"))

    def test_existing_pr_is_found_and_updated(self, github_double: GitHubDouble,
                                              github_settings: Settings) -> None:
        """An open PR for the branch (opened earlier) is edited instead of duplicated."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        github_double.repo(REPO).pulls[first.pr_number].title = "old"
        out = publish(github_settings, plan(job_for(sha), S.hardware()))
        assert out.pr_number == first.pr_number and not out.created
        assert github_double.repo(REPO).pulls[first.pr_number].title.startswith("nkibot: ")


class TestHumanDecisions:
    def test_moved_base_is_rebased_when_only_nkibot_committed(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A retry on a newer base recreates the one commit on it (a forced, checked update)."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        newer = github_double.commit(REPO, {"src/other.py": "x = 1\n"})
        out = publish(github_settings, plan(job_for(newer, generation=1)))
        repo = github_double.repo(REPO)
        assert repo.commits[out.commit_sha].parents == [newer]
        assert not repo.is_ancestor(first.commit_sha, out.commit_sha)
        assert "src/other.py" in github_double.files_at(REPO, BRANCH)
        forced = [c for c in github_double.calls_to("PATCH", "/git/refs/")
                  if c.body and c.body.get("force")]
        assert len(forced) == 1 and out.pr_number == first.pr_number

    def test_someone_elses_push_is_left_alone(self, github_double: GitHubDouble,
                                              github_settings: Settings) -> None:
        """A retry finds a human commit on the nki/ branch: nothing is written, it says why."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        human = github_double.commit(REPO, {"nki_kernels/norm.py": "# tuned by hand\n"},
                                     branch=BRANCH, message="hand tuning")
        body_before = github_double.repo(REPO).pulls[first.pr_number].body
        writes = len(github_double.calls_to("POST", "/git/commits"))
        newer = github_double.commit(REPO, {"src/other.py": "x = 1\n"})
        out = left_alone(github_settings, plan(job_for(newer, generation=1), S.hardware()))
        repo = github_double.repo(REPO)
        assert repo.refs[f"heads/{BRANCH}"] == human and "Someone else" in out.reason
        assert human[:12] in out.reason and "hand tuning" in out.reason
        assert len(github_double.calls_to("POST", "/git/commits")) == writes
        assert repo.pulls[first.pr_number].body == body_before
        assert not github_double.calls_to("PATCH", "/pulls/")

    def test_human_closed_pr_is_not_reopened_by_a_retry(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A retry after a maintainer closed the PR neither reopens it nor opens another."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        repo = github_double.repo(REPO)
        repo.pulls[first.pr_number].state = "closed"
        head = repo.refs[f"heads/{BRANCH}"]
        out = left_alone(github_settings, plan(job_for(sha, generation=1), S.hardware()))
        assert f"#{first.pr_number}" in out.reason and "/nki convert" in out.reason
        assert [p.state for p in repo.pulls.values()] == ["closed"]
        assert repo.refs[f"heads/{BRANCH}"] == head

    def test_new_convert_after_a_close_opens_a_new_pr(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A new `/nki convert` (generation 0) after the close opens a fresh pull request."""
        sha = seed(github_double)
        first = publish(github_settings, plan(job_for(sha)))
        repo = github_double.repo(REPO)
        repo.pulls[first.pr_number].state = "closed"
        out = publish(github_settings, plan(job_for(sha), S.hardware()))
        assert out.created and out.pr_number != first.pr_number
        assert sorted(p.state for p in repo.pulls.values()) == ["closed", "open"]
