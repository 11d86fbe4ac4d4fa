"""`nkibot runner`: workers that lease jobs and run them, one per NeuronCore.

Each worker leases from the `jobs` queue, extends its lease while it works, and acks
only when the job's results are on GitHub. SIGTERM asks every worker to finish its
current turn and release its job (uncounted) for another runner. A job that keeps failing
for reasons outside the user's control is retried with backoff; on its last attempt
its check run is completed as failed, saying why, and the queue dead-letters it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from nkibot.config.settings import Settings
from nkibot.github.checks import CheckRun, cancelled_on_github, reply_once
from nkibot.github.gateway import GitHubGateway
from nkibot.github.render import error_comment, error_output
from nkibot.jobs.model import Job
from nkibot.jobs.queue import DeadLetterSource, Lease, Queue
from nkibot.jobs.state import JobStateStore
from nkibot.runner.jobrun import JobRunner
from nkibot.runner.timings import Timings

if TYPE_CHECKING:
    from githubkit import GitHub

log = structlog.get_logger("nkibot.runner")
#: An installation id -> its githubkit client (the runner wraps it in a GitHubGateway).
ClientFactory = Callable[[int], "GitHub[Any]"]
#: Job states that mean nobody has told the user how the job ended.
UNREPORTED = frozenset({None, "queued", "running"})
#: Short wait before a job deferred for fairness becomes visible again.
FAIRNESS_DELAY_S = 5.0


def worker_count(settings: Settings, cores: Callable[[], int] | None = None) -> int:
    """settings.workers, else one per NeuronCore on the host, else 1."""
    if settings.workers:
        return settings.workers
    if cores is None:
        from nkibot.backends.neuron.devices import neuron_core_count

        cores = neuron_core_count
    try:
        return max(1, cores())
    except Exception:  # no neuron-ls, or it failed: a CPU host runs one worker
        return 1


def retry_delay(attempt: int) -> float:
    return float(min(300, 5 * 2 ** max(0, attempt - 1)))


@dataclass
class Runner:
    """Shared state of one runner process: queue, state store, fairness counts."""

    settings: Settings
    queue: Queue
    state: JobStateStore
    clients: ClientFactory
    poll_s: float = 1.0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    running: Counter[int] = field(default_factory=Counter)
    completed: list[tuple[str, Timings]] = field(default_factory=list)
    gateways: dict[int, GitHubGateway] = field(default_factory=dict)

    def gateway(self, installation_id: int) -> GitHubGateway:
        if installation_id not in self.gateways:
            self.gateways[installation_id] = GitHubGateway(self.clients(installation_id))
        return self.gateways[installation_id]

    def stop(self) -> None:
        """SIGTERM: finish the current turn, release the job, take no new ones."""
        self.stopping.set()

    async def serve(self, workers: int, *, exit_when_idle: bool = False) -> None:
        await self.sweep_dead_letters()
        await asyncio.gather(*(self.worker(core, exit_when_idle=exit_when_idle)
                               for core in range(workers)))

    async def sweep_dead_letters(self) -> int:
        """Fail the check runs of jobs the queue buried without a worker saying why.

        A runner killed on a job's last attempt cannot report; the queue then buries the
        job at its next lease. The SQLite queue lists its dead letters, so the next runner
        reports them (SQS's dead-letter queue is watched by an alarm instead).
        """
        if not isinstance(self.queue, DeadLetterSource):
            return 0
        reported = 0
        for letter in await asyncio.to_thread(self.queue.dead_letters):
            try:
                job = Job.model_validate_json(letter.body)
            except ValidationError:
                continue
            status = await asyncio.to_thread(self.state.status, job.id)
            if status in UNREPORTED:
                await self._give_up(self.gateway(job.installation_id), job,
                                    f"its runner stopped {letter.attempts} times before it "
                                    f"finished ({letter.reason})", dead=True)
                reported += 1
        return reported

    async def worker(self, core_id: int, *, exit_when_idle: bool = False) -> None:
        while not self.stopping.is_set():
            lease = await asyncio.to_thread(self.queue.lease, self.settings.lease_seconds)
            if lease is None:
                if exit_when_idle and self.running.total() == 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.poll_s)
                continue
            await self.handle(lease, core_id)

    async def handle(self, lease: Lease, core_id: int) -> None:
        try:
            job = Job.model_validate_json(lease.body)
        except ValidationError as exc:
            log.error("dropping a job that does not parse", item=lease.item_id, error=str(exc))
            await asyncio.to_thread(self.queue.ack, lease)
            return
        inst = job.installation_id
        if self.running[inst] >= self.settings.max_jobs_per_installation:
            log.info("deferred for fairness", job=job.id, installation=inst)
            # A deferral is not an attempt: release() gives the job back uncounted.
            await asyncio.to_thread(self.queue.release, lease, FAIRNESS_DELAY_S)
            return
        self.running[inst] += 1
        try:
            await self._with_lease(lease, job, core_id)
        finally:
            self.running[inst] -= 1

    async def _with_lease(self, lease: Lease, job: Job, core_id: int) -> None:
        keeper = asyncio.ensure_future(self._keep_lease(lease))
        try:
            outcome = await self._attempt(lease, job, core_id)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if outcome == "release":
            await asyncio.to_thread(self.queue.release, lease, 0.0)
        elif outcome == "retry":
            await asyncio.to_thread(self.queue.nack, lease, retry_delay(lease.attempt))
        else:
            await asyncio.to_thread(self.queue.ack, lease)

    async def _keep_lease(self, lease: Lease) -> None:
        """The heartbeat: a short lease extended while the job runs (a killed runner stops it)."""
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds())
            try:
                await asyncio.to_thread(self.queue.extend, lease, self.settings.lease_seconds)
            except Exception:  # a busy queue or a network blip: the next beat tries again
                log.warning("lease heartbeat failed", item=lease.item_id, exc_info=True)

    async def _attempt(self, lease: Lease, job: Job, core_id: int) -> str:
        gw = self.gateway(job.installation_id)
        if (await asyncio.to_thread(self.state.is_cancelled, job.id)
                or await cancelled_on_github(gw, job)):
            await JobRunner(gw, job, self.settings, core_id=core_id, should_stop=lambda: True,
                            releasing=lambda: False).cancelled()
            await asyncio.to_thread(self.state.set_status, job.id, "cancelled")
            return "ack"
        await asyncio.to_thread(self.state.set_status, job.id, "running")
        remote = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_cancel(gw, job, remote))
        runner = JobRunner(gw, job, self.settings, core_id=core_id,
                           should_stop=lambda: remote.is_set() or self._should_stop(job.id),
                           releasing=self.stopping.is_set)
        log.info("job started", job=job.id, target=job.target, attempt=lease.attempt,
                 core=core_id)
        try:
            outcome = await asyncio.wait_for(runner.execute(), self.settings.job_timeout_s)
        except TimeoutError:
            await self._give_up(gw, job, f"the job ran longer than the per-job limit of "
                                f"{self.settings.job_timeout_s:g} s", dead=False, run=runner.run)
            return "ack"
        except Exception as exc:
            log.exception("job attempt failed", job=job.id, attempt=lease.attempt)
            if lease.attempt < self.settings.max_attempts and not self.stopping.is_set():
                return "retry"
            await self._give_up(gw, job, f"it failed {lease.attempt} times; last error: "
                                f"{type(exc).__name__}: {exc}", dead=True, run=runner.run)
            return "retry"  # the queue buries it: this was the last attempt
        finally:
            watcher.cancel()
        if outcome == "release":
            await asyncio.to_thread(self.state.set_status, job.id, "queued")
            return "release"
        status = runner.result.status if runner.result is not None else "failed"
        await asyncio.to_thread(self.state.set_status, job.id, status)
        self.completed.append((job.id, runner.timings))
        log.info("job finished", job=job.id, status=status, stages=runner.timings.stages)
        return "ack"

    async def _watch_cancel(self, gw: GitHubGateway, job: Job, flag: asyncio.Event) -> None:
        """Poll the job's check run so a cancel made on another host stops this one."""
        every = max(1.0, self.settings.check_run_update_interval_s)
        while not flag.is_set():
            await asyncio.sleep(every)
            if await cancelled_on_github(gw, job):
                flag.set()

    def _should_stop(self, job_id: str) -> bool:
        return self.stopping.is_set() or self.state.is_cancelled(job_id)

    async def _give_up(self, gw: GitHubGateway, job: Job, why: str, *, dead: bool,
                       run: CheckRun | None = None) -> None:
        """Complete the check run as failed and say why (best effort: GitHub may be down)."""
        message = f"nkibot gave up on this job: {why}"
        hint = ("Comment `/nki retry` to try again." if not dead else
                "It was moved to the dead-letter queue; comment `/nki retry` to try again.")
        run = run or CheckRun(gw, job)
        try:
            await run.complete("failure", error_output(job.target, message, hint))
            await reply_once(gw, job, error_comment(job.target, message, hint=hint,
                                                    check_run_url=run.html_url))
        except Exception:
            log.exception("could not report the failure on GitHub", job=job.id)
        await asyncio.to_thread(self.state.set_status, job.id, "dead" if dead else "failed")
