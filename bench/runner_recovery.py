"""Recovery from SIGKILL at production lease settings: SIGKILL to the job running again.

    python bench/runner_recovery.py [--lease 30] [--heartbeat 10]

Two real `nkibot runner` processes, a SQLite jobs queue and the GitHub double on
loopback (tests/runner/recovery.py). The runner holding the job is killed after it held
the job past one lease on heartbeats alone; prints the measured seconds until the other
runner started the job's check run again, beside the bound (lease + one poll): the last
beat can be at most `heartbeat` before the kill, so the wait is lease - heartbeat .. lease.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.runner_throughput import APP_ID, keys  # noqa: E402
from nkibot.config.settings import Settings  # noqa: E402
from tests.fakes.github import GitHubDouble  # noqa: E402
from tests.fakes.server import ServerThread  # noqa: E402
from tests.runner.recovery import measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=10.0)
    args = parser.parse_args()
    private, public = keys()
    double = GitHubDouble(APP_ID, public)
    with ServerThread(double.asgi) as url, tempfile.TemporaryDirectory() as tmp:
        double.base_url = url
        settings = Settings(_env_file=None, app_id=APP_ID,  # type: ignore[call-arg]
                            private_key=private, github_url=url,
                            queue_url=f"sqlite:///{tmp}/queue.db")
        got = measure(double, settings, Path(tmp), lease_s=args.lease, beat_s=args.heartbeat,
                      hold_s=args.lease + 5)
    print(f"lease {args.lease:g} s, heartbeat {args.heartbeat:g} s: held {got.held_s:.1f} s "
          f"on heartbeats; SIGKILL -> running again in {got.seconds:.1f} s "
          f"(bound {args.lease - args.heartbeat:g}..{args.lease + 0.1:g} s + start-up of the "
          f"check-run update); job {got.conclusion}, {got.pulls} PR, {got.attempts} attempts")
    if double.errors:
        print("GitHub double errors:", double.errors)


if __name__ == "__main__":
    main()
