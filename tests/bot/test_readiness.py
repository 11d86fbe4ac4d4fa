"""What an operator sees: the dead-letter line and row, /readyz's verdict, the start-up line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import structlog
from fastapi.testclient import TestClient

from nkibot.bot.app import create_app
from nkibot.bot.dispatcher import Dispatcher
from nkibot.bot.readiness import startup_fields
from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_job_state, open_named_queue, sqlite_path
from nkibot.logging import configure
from tests.bot.conftest import REPO, Bot
from tests.bot.test_durability import free_port
from tests.fakes.github_fixtures import TEST_WEBHOOK_SECRET


def _json_lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def _make_visible(settings: Settings) -> None:
    """Skip the retry delay: the next lease takes the item now."""
    path = sqlite_path(settings.queue_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE q_inbox SET visible_at=0 WHERE state='ready'")


class TestDeadLetter:
    async def test_last_attempt_says_dead_and_keeps_the_cause(
            self, bot: Bot, capsys: pytest.CaptureFixture[str]) -> None:
        """Attempt 1 promises a retry; attempt 2 of 2 is dead-lettered with its cause, which
        the dead row keeps and /readyz shows. No line promises a retry that won't come."""
        settings = bot.settings.model_copy(update={"max_attempts": 2})
        inbox = open_named_queue("inbox", settings)
        dispatcher = Dispatcher(settings, inbox, bot.jobs, open_job_state(settings))
        bot.deliver("issue_comment_created_issue")
        del bot.double.repos[REPO]  # every repository call is now a 404
        configure("info", json=True)
        capsys.readouterr()
        assert await dispatcher.drain() == 1
        _make_visible(settings)
        assert await dispatcher.drain() == 1
        lines = [ln for ln in _json_lines(capsys.readouterr().err)
                 if "delivery" in str(ln["event"]) and ln["level"] == "error"]
        assert [ln["event"] for ln in lines] == [
            "delivery failed; it will be retried", "delivery dead-lettered: it will not be retried"]
        first, last = lines
        assert first["retry_in_s"] == 2.0 and "retry_in_s" not in last
        assert last["attempts"] == 2 and "404" in str(last["cause"])
        exc = last["exception"]
        assert isinstance(exc, dict) and exc["type"] == "RequestFailed" and exc["stack"]
        dead = inbox.dead_letters()
        assert len(dead) == 1 and dead[0].reason == f"failed 2 times: {last['cause']}"
        ready = TestClient(create_app(settings, inbox)).get("/readyz").json()
        assert ready["dead_letters"]["count"] == 1
        assert ready["dead_letters"]["newest"][0]["reason"] == dead[0].reason
        structlog.reset_defaults()


class TestReadyz:
    def _client(self, settings: Settings, tmp_path: Path, **update: object) -> TestClient:
        s = settings.model_copy(update={"dispatcher_enabled": True, **update})
        return TestClient(create_app(s, open_named_queue("inbox", s)))

    def test_ready_when_github_accepts_the_app(self, github_settings: Settings,
                                               tmp_path: Path) -> None:
        """Against the GitHub double: GET /app as the App answers, so the service is ready."""
        resp = self._client(github_settings, tmp_path).get("/readyz")
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["status"] == "ready" and body["github"]["ok"] is True
        assert f"id {github_settings.app_id}" in body["github"]["detail"]

    def test_not_ready_without_credentials(self, github_settings: Settings,
                                           tmp_path: Path) -> None:
        """No App id or key: not ready, and says which; /healthz is still alive."""
        client = self._client(github_settings, tmp_path, app_id=None, private_key=None)
        resp = client.get("/readyz")
        assert resp.status_code == 503
        assert resp.json()["status"] == "not ready"
        assert "no NKIBOT_APP_ID and no private key" in resp.json()["github"]["detail"]
        assert client.get("/healthz").json() == {"status": "ok"}

    def test_not_ready_when_github_is_unreachable(self, github_settings: Settings,
                                                  tmp_path: Path) -> None:
        """A GitHub URL nobody answers on: not ready, with the URL and the error."""
        client = self._client(github_settings, tmp_path, github_url="http://127.0.0.1:9")
        resp = client.get("/readyz")
        assert resp.status_code == 503
        assert "http://127.0.0.1:9 is unreachable" in resp.json()["github"]["detail"]
        assert client.get("/healthz").status_code == 200

    def test_dispatcher_apart_does_not_need_github(self, github_settings: Settings,
                                                   tmp_path: Path) -> None:
        """The ack path makes no GitHub call: with the dispatcher apart, no App is needed."""
        client = self._client(github_settings, tmp_path, app_id=None, private_key=None,
                              dispatcher_enabled=False)
        body = client.get("/readyz").json()
        assert body["status"] == "ready" and body["github"]["ok"] is None


class TestStartup:
    def test_fields_name_address_queue_app_and_events(self, github_settings: Settings) -> None:
        fields = startup_fields(github_settings, "127.0.0.1", 8080)
        assert fields["address"] == "http://127.0.0.1:8080"
        assert fields["queue"] == github_settings.queue_url
        assert fields["app_id"] == github_settings.app_id
        assert fields["app_credentials"] == "present"
        assert "issue_comment" in fields["events"]
        bare = startup_fields(github_settings.model_copy(update={"app_id": None}), "h", 1)
        assert bare["app_id"] == "absent" and "NKIBOT_APP_ID" in bare["app_credentials"]


ROOT = str(Path(__file__).resolve().parents[2])


def _serve_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NKIBOT_")}
    # The child imports this checkout's nkibot, whichever one is installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, env.get("PYTHONPATH"))))
    env.update({"NKIBOT_WEBHOOK_SECRET": TEST_WEBHOOK_SECRET, "NKIBOT_LOG_JSON": "true",
                "NKIBOT_QUEUE_URL": settings.queue_url, "NKIBOT_GITHUB_URL": settings.github_url,
                **extra})
    return env


class TestServe:
    def test_refuses_to_start_without_app_credentials(self, github_settings: Settings,
                                                      tmp_path: Path) -> None:
        """Only a webhook secret and the dispatcher in-process: refuse, say what is missing
        and how to run without it."""
        proc = subprocess.run([sys.executable, "-m", "nkibot.cli", "serve", "--port", "9"],
                              env=_serve_env(github_settings), cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert "no NKIBOT_APP_ID and no private key" in proc.stderr
        assert "--no-dispatcher" in proc.stderr

    def test_start_up_line(self, github_settings: Settings, tmp_path: Path) -> None:
        """One line at start: address, queue, App id, events; the key is never in it."""
        port = free_port()
        pem = github_settings.private_key_pem() or ""
        env = _serve_env(github_settings, NKIBOT_APP_ID=str(github_settings.app_id),
                         NKIBOT_PRIVATE_KEY=pem)
        log = tmp_path / "serve.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "nkibot.cli", "serve", "--port",
                                     str(port)], env=env, cwd=tmp_path, stderr=sink,
                                    stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while "nkibot serve starting" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        line = next(json.loads(ln) for ln in log.read_text().splitlines()
                    if "nkibot serve starting" in ln)
        assert line["address"] == f"http://127.0.0.1:{port}"
        assert line["queue"] == github_settings.queue_url
        assert line["app_id"] == github_settings.app_id
        assert line["dispatcher"] == "in-process" and "check_run" in line["events"]
        assert "PRIVATE KEY" not in log.read_text()
