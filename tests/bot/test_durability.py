"""Durability: an acknowledged delivery survives kill -9 and is dispatched exactly once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from nkibot.config.settings import Settings
from nkibot.jobs.sqlite import SqliteQueue
from tests.bot.conftest import FILES, ISSUE_BODY, REPO
from tests.fakes.github import GitHubDouble
from tests.fakes.github_fixtures import TEST_WEBHOOK_SECRET, load_webhook

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(settings: Settings, dispatcher: bool,
          cwd: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    pem = settings.private_key_pem() or ""
    env = {**os.environ, "NKIBOT_APP_ID": str(settings.app_id), "NKIBOT_PRIVATE_KEY": pem,
           "NKIBOT_WEBHOOK_SECRET": TEST_WEBHOOK_SECRET, "NKIBOT_GITHUB_URL": settings.github_url,
           "NKIBOT_QUEUE_URL": settings.queue_url, "NKIBOT_DISPATCH_POLL_S": "0.1",
           "NKIBOT_DISPATCHER_ENABLED": "true" if dispatcher else "false",
           "NKIBOT_LOG_LEVEL": "warning"}
    log = cwd / f"serve-{port}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "nkibot.cli", "serve", "--host",
                                 "127.0.0.1", "--port", str(port)], env=env, cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nkibot serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)


class TestDurability:
    def test_kill_between_ack_and_dispatch(self, github_double: GitHubDouble,
                                           github_settings: Settings, tmp_path: Path) -> None:
        """After 202 and kill -9, a restarted service dispatches the delivery exactly once."""
        github_double.add_repo(REPO, FILES, installation_id=7)
        github_double.set_permission(REPO, "alice", "write")
        github_double.add_issue(REPO, 1, "Convert", ISSUE_BODY, user="alice")
        headers, body = load_webhook("issue_comment_created_issue")

        with serve(github_settings, dispatcher=False, cwd=tmp_path) as (url, proc):
            assert httpx.post(f"{url}/webhook", content=body, headers=headers).status_code == 202
            proc.kill()  # SIGKILL: no shutdown hooks, no flush beyond what the ack did
            proc.wait(timeout=10)
        assert github_double.calls == []

        with serve(github_settings, dispatcher=True, cwd=tmp_path) as (url, _proc):
            inbox = SqliteQueue(Path(github_settings.queue_url[len("sqlite:///"):]), "inbox")
            deadline = time.monotonic() + 30
            while (inbox.depth() or not github_double.check_runs) and time.monotonic() < deadline:
                time.sleep(0.1)
            # A redelivery after dispatch is refused at the door.
            again = httpx.post(f"{url}/webhook", content=body, headers=headers)
            assert again.status_code == 202 and again.json()["detail"] == "already stored"
            time.sleep(0.5)

        jobs = SqliteQueue(Path(github_settings.queue_url[len("sqlite:///"):]), "jobs")
        assert len(github_double.check_runs_of(REPO)) == 1
        assert len(github_double.calls_to("POST", "/check-runs$")) == 1
        assert jobs.count() == 1 and inbox.depth() == 0
