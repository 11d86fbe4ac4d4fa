"""The runner's workers against the GitHub double and a real SQLite queue."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.github.gateway import GitHubGateway
from nkibot.jobs.factory import open_job_state, open_queue
from nkibot.jobs.model import Job, Trigger
from nkibot.jobs.sqlite import SqliteQueue
from nkibot.results import TurnRecord
from nkibot.runner.progress import ProgressReporter, due
from nkibot.runner.worker import Runner, retry_delay, worker_count
from tests.fakes.anthropic import AnthropicDouble, tool_reply
from tests.fakes.github import GitHubDouble

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
REPO = "octo/models"
INSTALLATION = 7


def seed(double: GitHubDouble, config: str = "integrate: dispatch\n") -> str:
    repo = double.add_repo(REPO, {"src/norm.py": (ROOT / "examples" / "rmsnorm.py").read_text(),
                                  ".github/nki-bot.yml": config},
                           installation_id=INSTALLATION)
    double.add_issue(REPO, 5)
    return repo.refs["heads/main"]


def make_job(sha: str, target: str = "src/norm.py::RMSNorm", job_id: str = "j1",
             check_run_id: int | None = None) -> Job:
    return Job(id=job_id, repo=REPO, installation_id=INSTALLATION, target=target, sha=sha,
               check_run_id=check_run_id,
               trigger=Trigger(kind="comment", delivery_id=f"d-{job_id}", sender="octocat",
                               issue_number=5, comment_id=11))


def runner_for(settings: Settings, **overrides: Any) -> Runner:
    s = settings.model_copy(update={"model": "lowering", "backend": "sim",
                                    "check_run_update_interval_s": 0.0, **overrides})
    queue = open_queue(s.queue_url, "jobs", s)
    return Runner(s, queue, open_job_state(s), lambda i: installation_client(s, i), poll_s=0.05)


def enqueue(runner: Runner, job: Job) -> None:
    runner.state.record(job)
    runner.queue.put(job.model_dump_json().encode(), job.id)


def drain(runner: Runner, workers: int = 1) -> None:
    asyncio.run(runner.serve(workers, exit_when_idle=True))


def only_run(double: GitHubDouble) -> dict[str, Any]:
    (run,) = double.check_runs_of(REPO)
    return run


class TestVerifiedJob:
    def test_job_ends_in_check_run_branch_pr_and_reply(self, github_double: GitHubDouble,
                                                       github_settings: Settings) -> None:
        """A convertible target ends verified: check run, branch (with codemod), PR, reply."""
        sha = seed(github_double)
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha))
        drain(runner)
        run = only_run(github_double)
        statuses = [u.get("status") for u in run["updates"]]
        assert statuses[0] == "queued" and statuses[1] == "in_progress"
        assert run["status"] == "completed" and run["conclusion"] == "success"
        assert [a["identifier"] for a in run["actions"]] == ["retry", "retry_more_turns",
                                                             "reprofile"]
        assert "10/10 trials passed" in run["output"]["summary"]
        assert "simulator: not a latency measurement" in run["output"]["summary"]
        files = github_double.files_at(REPO, "nki/src-norm-rmsnorm")
        assert {"nki_kernels/norm_rms_norm_nki.py",
                "nki_kernels/test_norm_rms_norm_nki.py"} <= set(files)
        assert b"_nkibot_forward_torch" in files["src/norm.py"]
        (pr,) = github_double.repo(REPO).pulls.values()
        assert "Closes #5" in pr.body and "```mermaid" in pr.body
        (reply,) = github_double.comments_on(REPO, 5)
        assert reply["body"].startswith("✅ Verified NKI kernel for RMSNorm")
        assert f"/pull/{pr.number})" in reply["body"]
        assert runner.state.status("j1") == "verified"
        assert runner.queue.depth() == 0
        (_, timings), = runner.completed
        assert {"fetch", "discovery", "reference", "loop", "publish"} <= set(timings.stages)


class TestUserFailures:
    @pytest.mark.parametrize(("target", "message", "hint"), [
        ("src/norm.py::RMSNrom", "has no `RMSNrom`", "did you mean `RMSNorm`"),
        ("src/nrom.py::RMSNorm", "`src/nrom.py` does not exist", "did you mean `src/norm.py`"),
        ("../../etc/passwd::X", "leaves the repository", "relative to the repository root"),
        ("/etc/passwd::X", "is not a path inside the repository", "relative"),
    ], ids=["typo-name", "typo-path", "dotdot", "absolute"])
    def test_bad_targets_fail_with_a_helpful_reply(
            self, github_double: GitHubDouble, github_settings: Settings, target: str,
            message: str, hint: str) -> None:
        """A target nkibot cannot use gives a failed check run and a comment saying why."""
        sha = seed(github_double)
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha, target))
        drain(runner)
        run = only_run(github_double)
        assert run["conclusion"] == "failure" and message in run["output"]["summary"]
        (reply,) = github_double.comments_on(REPO, 5)
        assert message in reply["body"] and hint in reply["body"]
        assert runner.queue.depth() == 0 and not github_double.repo(REPO).pulls

    def test_tarball_with_a_symlink_is_refused(self, github_double: GitHubDouble,
                                               github_settings: Settings) -> None:
        """A repository archive carrying a link is refused with a clear reply."""
        import io
        import tarfile

        sha = seed(github_double)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("octo-models-abc/src/norm.py")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        github_double.repo(REPO).tarball = lambda _sha: buf.getvalue()  # type: ignore[method-assign]
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha))
        drain(runner)
        assert "is a link" in only_run(github_double)["output"]["summary"]
        assert "archive was refused" in github_double.comments_on(REPO, 5)[0]["body"]


TRITON = """import triton
import triton.language as tl


@triton.jit
def norm_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass
"""
LEGACY = """import neuronxcc.nki as nki


@nki.jit
def old_kernel(a):
    return a
"""


class TestTritonAndLegacy:
    def test_triton_without_a_reference_says_what_to_add(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A Triton target with no configured reference fails with the yaml to add."""
        seed(github_double)
        github_double.commit(REPO, {"src/tri.py": TRITON})
        sha = github_double.repo(REPO).refs["heads/main"]
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha, "src/tri.py::norm_kernel"))
        drain(runner)
        assert only_run(github_double)["conclusion"] == "failure"
        reply = github_double.comments_on(REPO, 5)[0]["body"]
        assert "@triton.jit" in reply and "src/tri.py::norm_kernel: path/to/reference.py" in reply

    def test_triton_with_a_configured_reference_converts_it(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """`references:` maps the Triton target to a PyTorch module, which is converted."""
        seed(github_double, config="integrate: dispatch\nreferences:\n"
             "  src/tri.py::norm_kernel: src/norm.py::RMSNorm\n")
        github_double.commit(REPO, {"src/tri.py": TRITON})
        sha = github_double.repo(REPO).refs["heads/main"]
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha, "src/tri.py::norm_kernel"))
        drain(runner)
        assert only_run(github_double)["conclusion"] == "success"
        files = github_double.files_at(REPO, "nki/src-tri-norm-kernel")
        assert "nki_kernels/norm_rms_norm_nki.py" in files
        assert b"_nkibot_forward_torch" not in files["src/norm.py"]  # reference left alone

    def test_triton_with_a_launcher_runs_on_the_interpreter(
            self, github_double: GitHubDouble, github_settings: Settings,
            anthropic_double: AnthropicDouble) -> None:
        """Without a configured reference, the kernel's launcher is the reference."""
        pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")
        seed(github_double)
        github_double.commit(REPO, {"src/add.py": (FIXTURES / "triton" / "add.py").read_text()})
        sha = github_double.repo(REPO).refs["heads/main"]
        anthropic_double.enqueue(tool_reply("verify_kernel", {
            "code": (FIXTURES / "kernels" / "add_ok.py").read_text()}))
        runner = runner_for(github_settings, model="claude", anthropic_model="claude-test",
                            anthropic_api_key=SecretStr(anthropic_double.api_key),
                            anthropic_base_url=anthropic_double.base_url,
                            anthropic_max_retries=0)
        enqueue(runner, make_job(sha, "src/add.py::add_kernel"))
        drain(runner)
        assert only_run(github_double)["conclusion"] == "success"
        files = github_double.files_at(REPO, "nki/src-add-add-kernel")
        (test_file,) = [f for f in files if f.endswith("_test.py") or "/test_" in f]
        text = files[test_file].decode()
        assert "KIND = 'triton'" in text and "ENTRY = 'add'" in text

    def test_triton_without_a_launcher_says_what_to_add(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A kernel nothing launches, with triton installed, asks for a launcher or reference."""
        pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")
        seed(github_double)
        github_double.commit(REPO, {"src/tri.py": TRITON})
        sha = github_double.repo(REPO).refs["heads/main"]
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha, "src/tri.py::norm_kernel"))
        drain(runner)
        assert only_run(github_double)["conclusion"] == "failure"
        reply = github_double.comments_on(REPO, 5)[0]["body"]
        assert "no function in that file launches it" in reply and "add a plain function" in reply

    def test_legacy_kernel_is_reported_not_run(self, github_double: GitHubDouble,
                                               github_settings: Settings) -> None:
        """A neuronxcc.nki kernel is reported as the legacy dialect."""
        seed(github_double)
        github_double.commit(REPO, {"src/old.py": LEGACY})
        sha = github_double.repo(REPO).refs["heads/main"]
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha, "src/old.py::old_kernel"))
        drain(runner)
        assert "legacy `neuronxcc.nki` dialect" in only_run(github_double)["output"]["summary"]


class TestQueueBehaviour:
    def test_cancelled_job_never_starts(self, github_double: GitHubDouble,
                                        github_settings: Settings) -> None:
        """A job cancelled while queued completes its check run as cancelled, unfetched."""
        sha = seed(github_double)
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha))
        runner.state.mark_cancelled("j1")
        drain(runner)
        assert only_run(github_double)["conclusion"] == "cancelled"
        assert not github_double.calls_to("GET", "/tarball/")
        assert runner.state.status("j1") == "cancelled"

    def test_sigterm_releases_the_job(self, github_double: GitHubDouble,
                                      github_settings: Settings) -> None:
        """After stop() the current job ends at a turn boundary and goes back to the queue."""
        sha = seed(github_double)
        runner = runner_for(github_settings)
        enqueue(runner, make_job(sha))
        lease = runner.queue.lease(60)
        assert lease is not None
        runner.stop()
        asyncio.run(runner.handle(lease, 0))
        assert runner.queue.depth() == 1 and runner.state.status("j1") == "queued"
        assert only_run(github_double)["status"] == "in_progress"
        assert not github_double.repo(REPO).pulls
        again = runner.queue.lease(60)
        assert again is not None and again.attempt == 1  # a release uses no attempt

    def test_fairness_defers_a_busy_installation(self, github_double: GitHubDouble,
                                                 github_settings: Settings) -> None:
        """A third job of an installation already running two is put back with a delay."""
        sha = seed(github_double)
        runner = runner_for(github_settings, max_jobs_per_installation=2)
        enqueue(runner, make_job(sha))
        runner.running[INSTALLATION] = 2
        lease = runner.queue.lease(60)
        assert lease is not None
        asyncio.run(runner.handle(lease, 0))
        assert runner.queue.lease(60) is None  # invisible for the fairness delay
        assert runner.queue.depth() == 1
        assert github_double.calls_to("PATCH", "/check-runs/") == []

    def test_last_attempt_dead_letters_with_a_failed_check_run(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """An infrastructure failure on the last attempt fails the check run and buries the job."""
        sha = seed(github_double)
        gw = GitHubGateway(installation_client(github_settings, INSTALLATION))
        run_id = asyncio.run(gw.create_check_run(REPO, sha, "nkibot: x", "j1", "queued"))
        runner = runner_for(github_settings, max_attempts=1)
        enqueue(runner, make_job("f" * 40, check_run_id=run_id))  # no such commit: 404
        drain(runner)
        run = only_run(github_double)
        assert run["conclusion"] == "failure"
        assert "gave up on this job: it failed 1 times" in run["output"]["summary"]
        assert isinstance(runner.queue, SqliteQueue)
        assert [d.item_id for d in runner.queue.dead_letters()] == ["j1"]
        assert runner.state.status("j1") == "dead"


    def test_per_job_timeout_fails_the_check_run(self, github_double: GitHubDouble,
                                                 github_settings: Settings) -> None:
        """A job running past NKIBOT_JOB_TIMEOUT_S is stopped and its check run fails."""
        sha = seed(github_double)
        runner = runner_for(github_settings, job_timeout_s=0.5)
        enqueue(runner, make_job(sha))
        drain(runner)
        run = only_run(github_double)
        assert run["conclusion"] == "failure"
        assert "longer than the per-job limit of 0.5 s" in run["output"]["summary"]
        assert runner.state.status("j1") == "failed" and runner.queue.depth() == 0

    def test_jobs_buried_after_a_dead_runner_are_reported(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A job whose runner died on its last attempt gets a failed check run on restart."""
        import time

        sha = seed(github_double)
        gw = GitHubGateway(installation_client(github_settings, INSTALLATION))
        run_id = asyncio.run(gw.create_check_run(REPO, sha, "nkibot: x", "j1", "queued"))
        runner = runner_for(github_settings, max_attempts=1)
        enqueue(runner, make_job(sha, check_run_id=run_id))
        runner.state.set_status("j1", "running")
        assert runner.queue.lease(0.01) is not None  # the runner that then died
        time.sleep(0.05)
        assert runner.queue.lease(60) is None  # the queue buries it
        drain(runner)
        run = only_run(github_double)
        assert run["conclusion"] == "failure"
        assert "its runner stopped 1 times" in run["output"]["summary"]
        assert runner.state.status("j1") == "dead"
        assert asyncio.run(runner.sweep_dead_letters()) == 0  # reported once only


class TestHelpers:
    def test_worker_count_prefers_setting_then_cores(self) -> None:
        """Concurrency is NKIBOT_WORKERS, else the NeuronCore count, else 1."""
        base = Settings(_env_file=None)  # type: ignore[call-arg]
        assert worker_count(base.model_copy(update={"workers": 3}), lambda: 8) == 3
        assert worker_count(base, lambda: 4) == 4
        assert worker_count(base, lambda: 0) == 1

        def broken() -> int:
            raise OSError("neuron-ls missing")
        assert worker_count(base, broken) == 1

    def test_retry_delay_backs_off_and_caps(self) -> None:
        """Retries wait 5, 10, 20 ... seconds, never more than 5 minutes."""
        assert [retry_delay(a) for a in (1, 2, 3)] == [5.0, 10.0, 20.0]
        assert retry_delay(30) == 300.0

    def test_progress_updates_are_throttled(self) -> None:
        """Turns inside the interval are coalesced into one later update with the latest turn."""
        sent: list[str] = []
        now = [0.0]

        async def send(output: Any) -> None:
            sent.append(output.title)

        async def go() -> None:
            rep = ProgressReporter(send, "a.py::M", interval_s=0.2, clock=lambda: now[0])
            for turn in (1, 2, 3):
                rep.on_turn(TurnRecord(turn=turn, model="m", compiled=False))
            await asyncio.sleep(0)
            now[0] = 0.3
            await asyncio.sleep(0.3)
            await rep.close()
        asyncio.run(go())
        assert len(sent) == 2
        assert sent[0].startswith("M: turn 1") and sent[1].startswith("M: turn 3")
        assert due(10.0, None, 5.0) and not due(10.0, 8.0, 5.0)


class TestCancelAcrossHosts:
    def test_cancel_recorded_on_github_stops_a_queued_job(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """A check run completed as cancelled elsewhere keeps the job from starting here."""
        sha = seed(github_double)
        runner = runner_for(github_settings)
        gh = installation_client(runner.settings, INSTALLATION)
        created = gh.rest.checks.create("octo", "models", name="nkibot: src/norm.py::RMSNorm",
                                        head_sha=sha, status="queued", external_id="j1")
        run_id = created.parsed_data.id
        gh.rest.checks.update("octo", "models", run_id, status="completed",
                              conclusion="cancelled")
        # This runner's own state store knows nothing of the cancel (another host's dispatcher).
        enqueue(runner, make_job(sha, check_run_id=run_id))
        drain(runner)
        assert not github_double.calls_to("GET", "/tarball/")
        assert only_run(github_double)["conclusion"] == "cancelled"
        assert runner.state.status("j1") == "cancelled"
