"""The runner's GitHub writes besides publishing: its check run and its reply comment.

Every write is idempotent: updates set absolute state, the reply carries a hidden
marker and is skipped when a comment with that marker exists (a restarted job
repeats nothing visible).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from nkibot.github.render import CheckRunOutput, Conclusion
from nkibot.jobs.model import Job

CHECK_NAME_PREFIX = "nkibot: "
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
    return f"<!-- nkibot:job:{job.id} -->"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CheckRun:
    """One job's check run (created here only when the dispatcher did not)."""

    def __init__(self, gh: Any, job: Job) -> None:
        self.gh, self.job = gh, job
        self.owner, self.name = job.repo.split("/", 1)
        self.id: int | None = job.check_run_id
        self.html_url: str | None = None

    async def _find(self) -> int | None:
        """Our run for this job on its SHA, when an earlier attempt already created it."""
        resp = await self.gh.rest.checks.async_list_for_ref(
            self.owner, self.name, self.job.sha, check_name=CHECK_NAME_PREFIX + self.job.target,
            filter_="all", per_page=100)
        return next((int(r.id) for r in resp.parsed_data.check_runs
                     if r.external_id == self.job.id), None)

    async def ensure(self) -> int:
        if self.id is None:
            self.id = await self._find()
        if self.id is None:
            resp = await self.gh.rest.checks.async_create(
                self.owner, self.name, name=CHECK_NAME_PREFIX + self.job.target,
                head_sha=self.job.sha, status="queued", external_id=self.job.id,
                output={"title": "Queued", "summary": f"Converting `{self.job.target}`."})
            self.id = int(resp.parsed_data.id)
        return self.id

    async def _update(self, **fields: Any) -> None:
        run_id = await self.ensure()
        resp = await self.gh.rest.checks.async_update(self.owner, self.name, run_id, **fields)
        self.html_url = resp.parsed_data.html_url or self.html_url

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


async def cancelled_on_github(gh: Any, job: Job) -> bool:
    """True when the job's check run was completed as cancelled (by `/nki cancel`).

    The check run is the one record the dispatcher and every runner host share, so a
    cancel reaches a runner on another machine without a shared database. Any error
    reading it counts as "not cancelled": the local flag and later polls still apply.
    """
    if job.check_run_id is None:
        return False
    owner, name = job.repo.split("/", 1)
    try:
        resp = await gh.rest.checks.async_get(owner, name, job.check_run_id)
    except Exception:  # GitHub unavailable: keep working, poll again later
        return False
    run = resp.parsed_data
    return bool(run.status == "completed" and run.conclusion == "cancelled")


async def reply_once(gh: Any, job: Job, body: str, max_pages: int = 10) -> bool:
    """Comment on the trigger's thread unless this job's reply is already there."""
    number = job.trigger.issue_number
    if number is None:
        return False
    owner, name = job.repo.split("/", 1)
    marker = reply_marker(job)
    for page in range(1, max_pages + 1):
        resp = await gh.rest.issues.async_list_comments(owner, name, number, per_page=100,
                                                        page=page)
        comments: list[Any] = list(resp.parsed_data)
        if any(marker in (c.body or "") for c in comments):
            return False
        if len(comments) < 100:
            break
    await gh.rest.issues.async_create_comment(owner, name, number, body=f"{body}\n\n{marker}")
    return True
