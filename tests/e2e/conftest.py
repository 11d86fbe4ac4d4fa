"""The whole product on loopback: webhook service, dispatcher, SQLite queues, runner, doubles."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from nkibot.bot.app import create_app
from nkibot.bot.dispatcher import Dispatcher
from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.jobs.factory import open_job_state, open_named_queue
from nkibot.runner.worker import Runner
from tests.fakes.github import GitHubDouble
from tests.fakes.github_fixtures import load_webhook, signed_headers
from tests.fakes.server import ServerThread

REPO = "acme/models"
INSTALLATION = 7
ISSUE = 1
SENDER = "alice"
_COMMENT_IDS = itertools.count(9101)
FILES = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "models"


def repo_files() -> dict[str, str | bytes]:
    return {p.relative_to(FILES).as_posix(): p.read_bytes()
            for p in sorted(FILES.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@dataclass
class Stack:
    """Handles on every piece; methods drive one step of the flow each."""

    github: GitHubDouble
    settings: Settings
    url: str

    def comment(self, body: str, delivery: str | None = None, comment_id: int | None = None
                ) -> tuple[int, str]:
        """POST a signed `issue_comment.created` carrying `body`; (status, delivery id).

        Each call is a new comment (a fresh id) unless `comment_id` says otherwise: the
        service dedupes on the signed body, so the same id and text is a replay."""
        _headers, raw = load_webhook("issue_comment_created_issue")
        payload = json.loads(raw)
        payload["comment"]["body"] = body
        payload["comment"]["id"] = comment_id if comment_id is not None else next(_COMMENT_IDS)
        data = json.dumps(payload).encode()
        delivery = delivery or str(uuid.uuid4())
        resp = httpx.post(f"{self.url}/webhook", content=data,
                          headers=signed_headers(data, "issue_comment", delivery), timeout=30)
        return resp.status_code, delivery

    def dispatch(self) -> int:
        s = self.settings
        dispatcher = Dispatcher(s, open_named_queue("inbox", s), open_named_queue("jobs", s),
                                open_job_state(s))
        return asyncio.run(dispatcher.drain())

    def runner(self, **overrides: Any) -> Runner:
        s = self.settings.model_copy(update=overrides)
        return Runner(s, open_named_queue("jobs", s), open_job_state(s),
                      lambda i: installation_client(s, i), poll_s=0.05)

    def run_jobs(self, **overrides: Any) -> Runner:
        runner = self.runner(**overrides)
        asyncio.run(runner.serve(1, exit_when_idle=True))
        return runner

    # --- what the double holds ---------------------------------------------------------
    def check_runs(self) -> list[dict[str, Any]]:
        return self.github.check_runs_of(REPO)

    def replies(self) -> list[str]:
        return [c["body"] for c in self.github.comments_on(REPO, ISSUE)]

    def pulls(self) -> list[Any]:
        return list(self.github.repo(REPO).pulls.values())


def serve_stack(github_double: GitHubDouble, github_settings: Settings,
                config: str | None = None) -> Iterator[Stack]:
    """Seed the repository (with `config` as its `.github/nki-bot.yml` when given) and serve
    the webhook service on 127.0.0.1 for as long as the caller iterates."""
    files = repo_files()
    if config is not None:
        files[".github/nki-bot.yml"] = config
    github_double.add_repo(REPO, files, installation_id=INSTALLATION)
    github_double.add_issue(REPO, ISSUE, body="Please convert our norm.")
    github_double.set_permission(REPO, SENDER, "write")
    settings = github_settings.model_copy(update={
        "model": "lowering", "backend": "sim", "check_run_update_interval_s": 0.0,
        "anthropic_api_key": None})
    with ServerThread(create_app(settings)) as url:
        yield Stack(github_double, settings, url)


@pytest.fixture
def stack(github_double: GitHubDouble, github_settings: Settings) -> Iterator[Stack]:
    """The seeded repository, and the webhook service serving on 127.0.0.1."""
    yield from serve_stack(github_double, github_settings)
