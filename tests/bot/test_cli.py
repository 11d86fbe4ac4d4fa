"""`nkibot replay` signs a saved payload and POSTs it to a running service."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import structlog
from typer.testing import CliRunner

from nkibot.bot.app import create_app
from nkibot.cli import app
from nkibot.config.settings import Settings
from nkibot.jobs.sqlite import SqliteQueue
from tests.bot.conftest import REPO, Bot
from tests.fakes.github_fixtures import TEST_WEBHOOK_SECRET, WEBHOOK_FIXTURES, load_webhook
from tests.fakes.server import ServerThread


class TestReplay:
    def test_replay_fixture(self, tmp_path: Path) -> None:
        """A fixture replayed with the right secret is stored; a wrong secret exits 1 with 401."""
        inbox = SqliteQueue(tmp_path / "q.db", "inbox")
        settings = Settings(_env_file=None, webhook_secret=TEST_WEBHOOK_SECRET,  # type: ignore[call-arg]
                            dispatcher_enabled=False)
        payload = WEBHOOK_FIXTURES / "issues_labeled" / "payload.json"
        runner = CliRunner()
        with ServerThread(create_app(settings, inbox)) as url:
            ok = runner.invoke(app, ["replay", str(payload), "--url", f"{url}/webhook",
                                     "--secret", TEST_WEBHOOK_SECRET])
            assert ok.exit_code == 0 and ok.output.startswith("202"), ok.output
            bad = runner.invoke(app, ["replay", str(payload), "--url", f"{url}/webhook",
                                      "--secret", "wrong", "--delivery", "other-id"])
            assert bad.exit_code == 1 and bad.output.startswith("401")
        lease = inbox.lease(10)
        headers, _ = load_webhook("issues_labeled")
        assert lease is not None and lease.item_id == headers["x-github-delivery"]
        assert inbox.count() == 1


class TestDispatchCommand:
    def test_dispatch_once_drains_the_inbox(self, bot: Bot, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
        """`nkibot dispatch --once`, configured only by NKIBOT_ variables, drains the inbox."""
        bot.deliver("issue_comment_created_issue")
        s = bot.settings
        monkeypatch.chdir(tmp_path)
        for name, value in {"APP_ID": str(s.app_id), "PRIVATE_KEY": s.private_key_pem() or "",
                            "GITHUB_URL": s.github_url, "QUEUE_URL": s.queue_url,
                            "LOG_LEVEL": "warning"}.items():
            monkeypatch.setenv(f"NKIBOT_{name}", value)
        handlers = list(logging.root.handlers)
        try:
            result = CliRunner().invoke(app, ["dispatch", "--once"])
        finally:
            # The command configures logging onto CliRunner's captured stderr; undo that.
            structlog.reset_defaults()
            logging.root.handlers[:] = handlers
        assert result.exit_code == 0 and "dispatched 1 deliveries" in result.output
        assert len(bot.double.check_runs_of(REPO)) == 1 and len(bot.queued_jobs()) == 1
