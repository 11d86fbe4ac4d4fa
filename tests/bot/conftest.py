"""A seeded GitHub double plus the bot's queues, shared by the dispatcher tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from nkibot.bot.app import create_app
from nkibot.bot.dispatcher import Dispatcher
from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_job_state, open_named_queue
from nkibot.jobs.model import Job
from nkibot.jobs.queue import Queue
from nkibot.jobs.state import JobStateStore
from tests.fakes.github import GitHubDouble
from tests.fakes.github_fixtures import load_webhook, signed_headers

REPO = "acme/models"
FILES = {
    "src/models/norm.py": "import torch\nclass RMSNorm(torch.nn.Module):\n    pass\n",
    "src/models/mlp.py": "import torch\nclass SwiGLU(torch.nn.Module):\n    pass\n",
    ".github/nki-bot.yml": "targets: [src/models/mlp.py::SwiGLU]\nturns: 5\n",
}
ISSUE_BODY = "- src/models/norm.py::RMSNorm\n- src/models/mlp.py::SwiGLU\n"


@dataclass
class Bot:
    settings: Settings
    double: GitHubDouble
    inbox: Queue
    jobs: Queue
    state: JobStateStore
    dispatcher: Dispatcher
    client: TestClient

    def deliver(self, scenario: str, mutate: Callable[[dict[str, Any]], None] | None = None,
                delivery: str | None = None) -> str:
        """POST a saved webhook (optionally edited and re-signed); return its delivery id."""
        headers, body = load_webhook(scenario)
        payload = json.loads(body)
        if mutate is not None:
            mutate(payload)
        raw = json.dumps(payload).encode()
        delivery = delivery or headers["x-github-delivery"]
        resp = self.client.post("/webhook", content=raw,
                                headers=signed_headers(raw, headers["x-github-event"], delivery))
        assert resp.status_code in (200, 202), resp.text
        return delivery

    async def drain(self) -> int:
        return await self.dispatcher.drain()

    def queued_jobs(self) -> list[Job]:
        found = []
        while (lease := self.jobs.lease(60)) is not None:
            found.append(Job.model_validate_json(lease.body))
        return found


@pytest.fixture
def bot(github_double: GitHubDouble, github_settings: Settings) -> Bot:
    github_double.add_repo(REPO, FILES, installation_id=7)
    github_double.set_permission(REPO, "alice", "write")
    github_double.add_issue(REPO, 1, "Convert RMSNorm to NKI", ISSUE_BODY, user="alice")
    github_double.add_pull(REPO, 2, "swiglu", {"src/models/mlp.py": "# changed\n"})
    settings = github_settings
    inbox = open_named_queue("inbox", settings)
    jobs = open_named_queue("jobs", settings)
    state = open_job_state(settings)
    dispatcher = Dispatcher(settings, inbox, jobs, state)
    return Bot(settings, github_double, inbox, jobs, state, dispatcher,
               TestClient(create_app(settings, inbox)))
