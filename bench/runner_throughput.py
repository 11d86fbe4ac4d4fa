"""Runner throughput: N queued jobs drained by 1 worker, then by 2; jobs/minute and stages.

    python bench/runner_throughput.py [--jobs 20] [--workers 1 2]

Everything real except GitHub: the GitHub double from tests/fakes serves the tarballs,
check runs, Git Data API and pulls on loopback; the queue is a SQLite file; the model
is the deterministic lowering and kernels run in the simulator. Each job converts a
small RMSNorm in its own repository (so every job publishes its own branch and PR).
Prints, per worker count, jobs/minute and the mean seconds per job of each stage
(fetch, discovery, reference, loop, profile, publish).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402

from nkibot.config.settings import Settings  # noqa: E402
from nkibot.github.client import installation_client  # noqa: E402
from nkibot.jobs.factory import open_job_state, open_queue  # noqa: E402
from nkibot.jobs.model import Job, Trigger  # noqa: E402
from nkibot.logging import configure  # noqa: E402
from nkibot.runner.worker import Runner  # noqa: E402
from tests.fakes.github import GitHubDouble  # noqa: E402
from tests.fakes.server import ServerThread  # noqa: E402

NORM = (ROOT / "tests" / "fixtures" / "repos" / "models" / "src" / "models" / "norm.py")
STAGES = ("fetch", "discovery", "reference", "loop", "profile", "publish")
APP_ID = 4242


def keys() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


def enqueue(double: GitHubDouble, runner: Runner, n: int, tag: str) -> None:
    for i in range(n):
        repo = f"bench/{tag}-{i}"
        sha = double.add_repo(repo, {"src/norm.py": NORM.read_text()},
                              installation_id=100 + i).refs["heads/main"]
        job = Job(id=f"{tag}-{i}", repo=repo, installation_id=100 + i,
                  target="src/norm.py::RMSNorm", sha=sha,
                  trigger=Trigger(kind="label", delivery_id=f"{tag}-{i}", sender="bench"))
        runner.state.record(job)
        runner.queue.put(job.model_dump_json().encode(), job.id)


def run(double: GitHubDouble, settings: Settings, jobs: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s = settings.model_copy(update={"queue_url": f"sqlite:///{tmp}/queue.db"})
        runner = Runner(s, open_queue(s.queue_url, "jobs", s), open_job_state(s),
                        lambda i: installation_client(s, i), poll_s=0.05)
        enqueue(double, runner, jobs, f"w{workers}")
        start = time.monotonic()
        asyncio.run(runner.serve(workers, exit_when_idle=True))
        wall = time.monotonic() - start
    done = len(runner.completed)
    means = {st: sum(t.stages.get(st, 0.0) for _, t in runner.completed) / max(1, done)
             for st in STAGES}
    print(f"workers={workers} jobs={done}/{jobs} wall={wall:.1f} s "
          f"throughput={done / wall * 60:.2f} jobs/min")
    print("  mean s/job: " + "  ".join(f"{st} {means[st]:.2f}" for st in STAGES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    configure("warning", json=False)
    private, public = keys()
    double = GitHubDouble(APP_ID, public)
    with ServerThread(double.asgi) as url:
        double.base_url = url
        settings = Settings(_env_file=None, app_id=APP_ID,  # type: ignore[call-arg]
                            private_key=private, github_url=url, model="lowering",
                            backend="sim", check_run_update_interval_s=2.0,
                            max_jobs_per_installation=2)
        for workers in args.workers:
            run(double, settings, args.jobs, workers)


if __name__ == "__main__":
    main()
