"""Drain the inbox: parse, decide, execute the decision's effects, and ack only after them.

Every effect is idempotent (check runs are looked up by external id, comments carry
a hidden marker, jobs are deduplicated by id), so an item repeated after a crash
changes nothing visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import anyio
import structlog

from nkibot.bot.delivery import Delivery
from nkibot.bot.metrics import Metrics
from nkibot.bot.scan import run_scan
from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.github.dashboard import update_rows
from nkibot.github.facts import gather
from nkibot.github.gateway import GitHubGateway, check_run_name, hidden_marker
from nkibot.handlers import Decision, Incoming, Policy, decide, owns, read_event, screen
from nkibot.jobs.model import Job
from nkibot.jobs.queue import Lease, Purgeable, Queue
from nkibot.jobs.state import JobStateStore
from nkibot.redact import redact

log = structlog.get_logger("nkibot.dispatcher")
INBOX_LEASE_S = 120.0
#: GitHub redelivers on request for a few days; keep delivery ids that long to dedupe.
KEEP_DONE_S = 7 * 24 * 3600.0
PURGE_EVERY_S = 3600.0
#: A dead row's cause is read in a table cell and a probe's JSON: the first line of it.
MAX_CAUSE_CHARS = 500
GatewayFactory = Callable[[int], GitHubGateway]


def policy_of(settings: Settings) -> Policy:
    return Policy(allowed_owners=tuple(settings.allowed_owners),
                  trigger_label=settings.trigger_label, min_permission=settings.min_permission,
                  app_id=settings.app_id, default_turns=settings.default_turns)


class Dispatcher:
    def __init__(self, settings: Settings, inbox: Queue, jobs: Queue, state: JobStateStore,
                 metrics: Metrics | None = None, gateways: GatewayFactory | None = None) -> None:
        self.settings = settings
        self.inbox, self.jobs, self.state = inbox, jobs, state
        self.metrics = metrics or Metrics()
        self.policy = policy_of(settings)
        self._gateways: dict[int, GitHubGateway] = {}
        self._factory = gateways or (
            lambda inst: GitHubGateway(installation_client(settings, inst)))

    def gateway(self, installation_id: int) -> GitHubGateway:
        if installation_id not in self._gateways:
            self._gateways[installation_id] = self._factory(installation_id)
        return self._gateways[installation_id]

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop` is set; an empty inbox waits `dispatch_poll_s`."""
        last_purge = 0.0
        while not stop.is_set():
            if time.monotonic() - last_purge > PURGE_EVERY_S:
                last_purge = time.monotonic()
                await self._purge()
            try:
                busy = await self.step()
            except Exception:
                log.exception("dispatcher step failed")
                busy = False
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.dispatch_poll_s)

    async def _purge(self) -> None:
        if not isinstance(self.inbox, Purgeable):  # SQLite only; SQS expires by itself
            return
        try:
            await anyio.to_thread.run_sync(self.inbox.purge_done, KEEP_DONE_S)
        except Exception:
            log.exception("inbox purge failed")

    async def drain(self) -> int:
        """Process until the inbox has nothing visible; the number of items handled."""
        count = 0
        while await self.step():
            count += 1
        return count

    async def step(self) -> bool:
        lease = await anyio.to_thread.run_sync(self.inbox.lease, INBOX_LEASE_S)
        if lease is None:
            return False
        start = time.monotonic()
        try:
            await self.process(lease)
        except Exception as exc:
            await self._failed(lease, exc)
            return True
        await anyio.to_thread.run_sync(self.inbox.ack, lease)
        self.metrics.dispatch_seconds.observe(time.monotonic() - start)
        return True

    async def _failed(self, lease: Lease, exc: Exception) -> None:
        """Nack with the cause; on the last attempt say so (no retry is promised) and the
        queue keeps the cause in its dead row for `nkibot doctor` and `/readyz`."""
        cause = redact(f"{type(exc).__name__}: {exc}")[:MAX_CAUSE_CHARS]
        if lease.attempt >= self.settings.max_attempts:
            log.error("delivery dead-lettered: it will not be retried", item=lease.item_id,
                      attempts=lease.attempt, cause=cause, exc_info=exc)
            await anyio.to_thread.run_sync(self.inbox.nack, lease, 0.0, cause)
            return
        delay = min(300.0, 2.0 ** lease.attempt)
        log.error("delivery failed; it will be retried", item=lease.item_id,
                  attempt=lease.attempt, of=self.settings.max_attempts, retry_in_s=delay,
                  cause=cause, exc_info=exc)
        await anyio.to_thread.run_sync(self.inbox.nack, lease, delay, cause)

    async def process(self, lease: Lease) -> Decision:
        delivery = Delivery.decode(lease.body)
        # Off the event loop: a body of megabytes takes a while to parse.
        inc = await anyio.to_thread.run_sync(
            read_event, delivery.event, delivery.delivery_id, delivery.body)
        screened = screen(inc, self.policy)
        if isinstance(screened, Decision):
            if inc.missing is not None:
                self._dropped(inc)
            self._count(inc.delivery_id, screened)
            return screened
        assert inc.installation_id is not None  # screen() ignores events without one
        gw = self.gateway(inc.installation_id)
        facts = await gather(gw, inc, screened, self.policy, self.state)
        decision = decide(inc, facts, self.policy)
        self._count(inc.delivery_id, decision)
        await self.execute(gw, inc, decision)
        return decision

    def _dropped(self, inc: Incoming) -> None:
        """A payload that lacks a needed field: say which, loudly (it may be a GitHub change)."""
        assert inc.missing is not None
        self.metrics.payloads_dropped.labels(inc.event, inc.missing).inc()
        log.warning("payload dropped: a field the decision needs is absent",
                    delivery=inc.delivery_id, github_event=inc.event, action=inc.action,
                    field=inc.missing)

    def _count(self, delivery_id: str, decision: Decision) -> None:
        self.metrics.decisions.labels(decision.kind).inc()
        log.info("decision", delivery=delivery_id, kind=decision.kind, reason=decision.reason,
                 jobs=[j.id for j in decision.jobs])

    async def execute(self, gw: GitHubGateway, inc: Incoming, decision: Decision) -> None:
        if decision.kind == "ignore":
            return
        if decision.react and inc.comment_id is not None:
            await gw.react_eyes(inc.repo, inc.comment_id)
        for job in decision.jobs:
            await self.enqueue(gw, job)
        for job_id in decision.cancel:
            await self.cancel(gw, inc, job_id)
        if decision.dashboard is not None:
            change = decision.dashboard
            await update_rows(gw, inc.repo, change.issue_number, change.updates)
        if decision.scan is not None:
            _number, text = await run_scan(gw, inc.repo, decision.scan)
            if decision.scan.reply_to is not None:
                await self.reply(gw, inc, decision.kind, text)
        if decision.reply is not None:
            await self.reply(gw, inc, decision.kind, decision.reply)

    async def enqueue(self, gw: GitHubGateway, job: Job) -> None:
        status = await anyio.to_thread.run_sync(self.state.status, job.id)
        if status not in (None, "queued"):
            # The same signed event again (a replay past the inbox's memory): this job
            # already ran. A job recorded but still queued is put again, since a crash
            # may have come between the record and the put; the queue dedupes it.
            log.warning("job already ran; not enqueued again", job=job.id, status=status)
            return
        name = check_run_name(job.target)
        run_id = await gw.find_check_run(job.repo, job.sha, name, job.id)
        if run_id is None:
            summary = f"Converting `{job.target}` at `{job.sha[:12]}`; waiting for a runner."
            run_id = await gw.create_check_run(job.repo, job.sha, name, job.id, summary)
        job = job.model_copy(update={"check_run_id": run_id})
        await anyio.to_thread.run_sync(self.state.record, job)
        if await anyio.to_thread.run_sync(self.jobs.put, job.model_dump_json().encode(), job.id):
            self.metrics.jobs_enqueued.inc()

    async def cancel(self, gw: GitHubGateway, inc: Incoming, job_id: str) -> None:
        job = await anyio.to_thread.run_sync(self.state.get, job_id)
        if job is None or not owns(inc, job):
            # A job id can come from text anyone may write (a dashboard's hidden state):
            # only a job of the event's own installation and repository is touched.
            log.warning("cancel refused: the job is not this repository's", job=job_id,
                        repo=inc.repo, installation=inc.installation_id)
            return
        await anyio.to_thread.run_sync(self.state.mark_cancelled, job_id)
        status = await anyio.to_thread.run_sync(self.state.status, job_id)
        # A queued job's check run is closed here; a running one is closed by its runner.
        if job is not None and job.check_run_id is not None and status == "queued":
            await gw.cancel_check_run(job.repo, job.check_run_id, "Cancelled by request.")

    async def reply(self, gw: GitHubGateway, inc: Incoming, kind: str, text: str) -> None:
        if inc.issue_number is None:
            log.info("no thread to reply on", delivery=inc.delivery_id, kind=kind)
            return
        await gw.comment_once(inc.repo, inc.issue_number, text,
                              hidden_marker("delivery", inc.identity, kind))
