"""Faults: a runner killed mid-job, and a GitHub that answers 502 and rate limits for a while."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import Stack

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 3.0


def runner_env(stack: Stack) -> dict[str, str]:
    s = stack.settings
    assert s.private_key is not None
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT), "NKIBOT_APP_ID": str(s.app_id),
        "NKIBOT_PRIVATE_KEY": s.private_key.get_secret_value(),
        "NKIBOT_GITHUB_URL": s.github_url, "NKIBOT_QUEUE_URL": s.queue_url,
        "NKIBOT_MODEL": "lowering", "NKIBOT_BACKEND": "sim", "NKIBOT_WORKERS": "1",
        "NKIBOT_LEASE_SECONDS": str(LEASE_S), "NKIBOT_CHECK_RUN_UPDATE_INTERVAL_S": "0",
        "NKIBOT_LOG_JSON": "false",
    }


def wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


class TestFaults:
    def test_killed_runner_is_finished_by_the_next(self, stack: Stack, tmp_path: Path) -> None:
        """kill -9 mid-job: after the lease expires a new runner completes it exactly once."""
        stack.comment("/nki convert src/models/norm.py::RMSNorm")
        stack.dispatch()
        log = (tmp_path / "runner.log").open("w")
        proc = subprocess.Popen(  # a real `nkibot runner` process, killed below
            [sys.executable, "-m", "nkibot.cli", "runner", "--poll", "0.1"], cwd=tmp_path,
            env=runner_env(stack), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: any(u.get("status") == "in_progress"
                                 for r in stack.check_runs() for u in r["updates"]))
            time.sleep(0.5)
            assert proc.poll() is None, (tmp_path / "runner.log").read_text()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the runner and its sandboxed children
            proc.wait(timeout=10)
            log.close()
        (run,) = stack.check_runs()
        assert run["status"] == "in_progress" and not stack.pulls()

        time.sleep(LEASE_S + 0.5)  # the dead runner's lease runs out
        stack.run_jobs(lease_seconds=LEASE_S)
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success"
        assert sum(u.get("status") == "completed" for u in run["updates"]) == 1
        assert len(stack.pulls()) == 1 and len(stack.replies()) == 1

    def test_sigterm_releases_the_job_for_the_next_runner(self, stack: Stack,
                                                          tmp_path: Path) -> None:
        """SIGTERM: the runner stops at a turn boundary, releases the job and exits cleanly."""
        stack.comment("/nki convert src/models/norm.py::RMSNorm")
        stack.dispatch()
        proc = subprocess.Popen(
            [sys.executable, "-m", "nkibot.cli", "runner", "--poll", "0.1"], cwd=tmp_path,
            env=runner_env(stack), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            wait_for(lambda: any(u.get("status") == "in_progress"
                                 for r in stack.check_runs() for u in r["updates"]))
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        assert proc.returncode == 0, out.decode()[-3000:]
        (run,) = stack.check_runs()
        assert run["status"] == "in_progress" and not stack.pulls()
        runner = stack.runner()
        assert runner.queue.depth() == 1 and runner.state.status(
            runner.state.find("acme/models")[0].id) == "queued"
        stack.run_jobs()
        assert stack.check_runs()[0]["conclusion"] == "success" and len(stack.pulls()) == 1

    def test_github_errors_and_rate_limits_are_ridden_out(self, stack: Stack) -> None:
        """502s and a secondary rate limit during the job are retried; it still completes."""
        stack.comment("/nki convert src/models/norm.py::RMSNorm")
        stack.dispatch()
        stack.github.fail_next(1, status=502)
        stack.github.rate_limit_next(1, retry_after=1)
        stack.run_jobs()
        statuses = [c.status for c in stack.github.calls]
        assert 502 in statuses and 403 in statuses
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success"
        assert len(stack.pulls()) == 1
        assert stack.replies()[-1].startswith("✅")
