"""A runner killed with SIGKILL mid-job: how long until another runner runs the job again.

Two real `nkibot runner` processes share a real SQLite jobs queue and the GitHub double.
The double holds the job's tarball download, so the job is mid-run for as long as the
test likes (its lease kept alive by the heartbeat); then the runner holding it is killed
and the clock runs until the job's check run is started again by the other runner.
Used by tests/runner/test_recovery.py (short leases) and bench/runner_recovery.py
(production leases).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_job_state
from nkibot.jobs.model import Job, Trigger
from nkibot.jobs.sqlite import SqliteQueue
from tests.fakes.github import GitHubDouble

ROOT = Path(__file__).resolve().parents[2]
REPO = "octo/recover"
INSTALLATION = 7


@dataclass(frozen=True)
class Recovery:
    #: Seconds from SIGKILL to the job's check run being started again.
    seconds: float
    #: Seconds the killed runner held the job (heartbeat only) before the kill.
    held_s: float
    conclusion: str | None
    pulls: int
    attempts: int


def _env(settings: Settings, lease_s: float, beat_s: float) -> dict[str, str]:
    return {**os.environ, "NKIBOT_APP_ID": str(settings.app_id),
            "NKIBOT_PRIVATE_KEY": settings.private_key_pem() or "",
            "NKIBOT_GITHUB_URL": settings.github_url, "NKIBOT_QUEUE_URL": settings.queue_url,
            "NKIBOT_MODEL": "lowering", "NKIBOT_BACKEND": "sim", "NKIBOT_WORKERS": "1",
            "NKIBOT_LEASE_SECONDS": str(lease_s), "NKIBOT_LEASE_HEARTBEAT_S": str(beat_s),
            "NKIBOT_CHECK_RUN_UPDATE_INTERVAL_S": "0", "NKIBOT_LOG_LEVEL": "info",
            "NKIBOT_LOG_JSON": "true"}


def _wait(cond: Any, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.02)
    return time.monotonic()


def _starts(double: GitHubDouble) -> int:
    runs = double.check_runs_of(REPO)
    return sum(1 for r in runs for u in r["updates"] if u.get("status") == "in_progress"
               and "started_at" in u)


def _holder(logs: list[Path]) -> int:
    """Which runner logged `job started` (index into logs), or -1."""
    for i, log in enumerate(logs):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == "job started":
                return i
    return -1


def measure(double: GitHubDouble, settings: Settings, tmp: Path, *, lease_s: float,
            beat_s: float, hold_s: float) -> Recovery:
    """Run the scenario once; the job is held `hold_s` seconds (> lease_s proves the beat)."""
    repo = double.add_repo(REPO, {"src/norm.py": (ROOT / "examples" / "rmsnorm.py").read_text()},
                           installation_id=INSTALLATION)
    double.add_issue(REPO, 5)
    sha = repo.refs["heads/main"]
    job = Job(id="recover1", repo=REPO, installation_id=INSTALLATION,
              target="src/norm.py::RMSNorm", sha=sha,
              trigger=Trigger(kind="comment", delivery_id="d-rec", sender="octocat",
                              issue_number=5, comment_id=11))
    open_job_state(settings).record(job)
    gate = double.hold(r"/tarball/")
    env = _env(settings, lease_s, beat_s)
    logs = [tmp / f"runner-{i}.log" for i in range(2)]
    procs = []
    for log in logs:
        with log.open("wb") as sink:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "nkibot.cli", "runner", "--poll", "0.1"], env=env,
                cwd=tmp, stdout=subprocess.DEVNULL, stderr=sink))
    try:
        time.sleep(2.0)  # both runners boot and poll an empty queue
        queue = SqliteQueue(Path(settings.queue_url[len("sqlite:///"):]), "jobs")
        queue.put(job.model_dump_json().encode(), job.id)
        _wait(lambda: _starts(double) == 1 and _holder(logs) >= 0, 60, "the first start")
        held_from = time.monotonic()
        time.sleep(hold_s)  # past the lease: only the heartbeat keeps it
        assert _starts(double) == 1, "the job was taken while its runner was alive"
        victim = _holder(logs)
        killed = time.monotonic()
        os.kill(procs[victim].pid, signal.SIGKILL)
        procs[victim].wait(timeout=10)
        gate.set()
        running = _wait(lambda: _starts(double) == 2, lease_s * 3 + 30, "the job to run again")
        _wait(lambda: all(r.get("status") == "completed" for r in double.check_runs_of(REPO)),
              240, "the job to finish")
    finally:
        gate.set()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    (run,) = double.check_runs_of(REPO)
    attempts = queue._conn.execute("SELECT attempts FROM q_jobs").fetchone()[0]
    return Recovery(running - killed, killed - held_from, run.get("conclusion"),
                    len(double.repo(REPO).pulls), int(attempts))
