"""The runner's check run and its reply comment, on the GitHub gateway's calls.

Every write is idempotent: updates set absolute state, the reply carries a hidden
marker and is skipped when a comment with that marker exists (a restarted job
repeats nothing visible).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from nkibot.github.gateway import GitHubGateway, check_run_name, hidden_marker
from nkibot.github.render import CheckRunOutput, Conclusion
from nkibot.jobs.model import Job

ACTIONS: dict[str, dict[str, str]] = {
    "retry": {"label": "Retry", "description": "Run the conversion again",
              "identifier": "retry"},
    "retry_more_turns": {"label": "Retry +5 turns", "description": "Again, with more turns",
                         "identifier": "retry_more_turns"},
    "reprofile": {"label": "Re-profile", "description": "Measure the kernel again",
                  "identifier": "reprofile"},
}


def actions_for(conclusion: Conclusion) -> list[dict[str, str]]:
    """Retry always; Re-profile only when there is a verified kernel to measure."""
    names = ["retry", "retry_more_turns"] + (["reprofile"] if conclusion == "success" else [])
    return [ACTIONS[n] for n in names]


def reply_marker(job: Job) -> str:
    return hidden_marker("job", job.id)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CheckRun:
    """One job's check run (created here only when the dispatcher did not)."""

    def __init__(self, gw: GitHubGateway, job: Job) -> None:
        self.gw, self.job = gw, job
        self.id: int | None = job.check_run_id
        self.html_url: str | None = None

    async def ensure(self) -> int:
        job = self.job
        name = check_run_name(job.target)
        if self.id is None:  # an earlier attempt may have created it
            self.id = await self.gw.find_check_run(job.repo, job.sha, name, job.id)
        if self.id is None:
            self.id = await self.gw.create_check_run(job.repo, job.sha, name, job.id,
                                                     f"Converting `{job.target}`.")
        return self.id

    async def _update(self, **fields: Any) -> None:
        run_id = await self.ensure()
        self.html_url = await self.gw.update_check_run(self.job.repo, run_id,
                                                       **fields) or self.html_url

    async def start(self, output: CheckRunOutput) -> None:
        await self._update(status="in_progress", started_at=_now(), output=output.payload())

    async def progress(self, output: CheckRunOutput) -> None:
        await self._update(status="in_progress", output=output.payload())

    async def complete(self, conclusion: Conclusion, output: CheckRunOutput) -> None:
        """Completed with the first 50 annotations; later batches follow in updates."""
        batches = output.batches() or [[]]
        actions = actions_for(conclusion) if conclusion != "cancelled" else []
        await self._update(status="completed", conclusion=conclusion, completed_at=_now(),
                           output=output.payload(batches[0]), actions=actions)
        for batch in batches[1:]:
            await self._update(output=output.payload(batch))


async def cancelled_on_github(gw: GitHubGateway, job: Job) -> bool:
    """True when the job's check run was completed as cancelled (by `/nki cancel`).

    The check run is the one record the dispatcher and every runner host share, so a
    cancel reaches a runner on another machine without a shared database. Any error
    reading it counts as "not cancelled": the local flag and later polls still apply.
    """
    if job.check_run_id is None:
        return False
    try:
        run = await gw.get_check_run(job.repo, job.check_run_id)
    except Exception:  # GitHub unavailable: keep working, poll again later
        return False
    return run.status == "completed" and run.conclusion == "cancelled"


async def reply_once(gw: GitHubGateway, job: Job, body: str) -> bool:
    """Comment on the trigger's thread unless this job's reply is already there."""
    number = job.trigger.issue_number
    if number is None:
        return False
    return await gw.comment_once(job.repo, number, body, reply_marker(job))
