"""One job's lifecycle, from a leased Job to a completed check run, a PR and a reply.

Intake (`runner.intake`), the conversion (`convert.pipeline`) or a re-profile
(`runner.reprofile`), codemod integration (`runner.integrate`), then publication and the
reply. Problems a user can fix (a bad target, a path outside the repository, a reference
that crashes) end as a failed check run plus a helpful comment; they never escape as
exceptions. Anything else (GitHub down, a bug) propagates so the worker can retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Literal

import structlog

from nkibot.backends.neuron import devices
from nkibot.backends.select import host_platform
from nkibot.config.settings import Settings
from nkibot.convert.discovery import TargetError
from nkibot.github.artifacts import header_line_count
from nkibot.github.checks import CheckRun, reply_once
from nkibot.github.dashboard import failure_update, report_row, result_update
from nkibot.github.gateway import GitHubGateway
from nkibot.github.publish import LeftAlone, Publisher, plan_publication
from nkibot.github.render import (
    check_run_output,
    conclusion,
    error_comment,
    error_output,
    progress_output,
    reply_comment,
)
from nkibot.handlers.dashboard import RowUpdate
from nkibot.jobs.model import Job
from nkibot.results import ConversionResult
from nkibot.runner.intake import Prepared, prepare
from nkibot.runner.integrate import integration
from nkibot.runner.progress import ProgressReporter
from nkibot.runner.timings import Timings
from nkibot.runner.workspace import workspace
from nkibot.task import Task
from nkibot.verify import zygote
from nkibot.verify.reference import shown_folders

log = structlog.get_logger("nkibot.runner.job")
Outcome = Literal["done", "release"]


async def run_conversion(task: Task, settings: Settings, job: Job, *, core_id: int | None,
                         on_turn: Callable[..., None], should_stop: Callable[[], bool],
                         on_stage: Callable[[str], None] | None = None) -> ConversionResult:
    from nkibot.convert.pipeline import ConvertOptions, convert

    return await convert(task, settings=settings, options=ConvertOptions(
        model=job.options.model or settings.model,
        backend=job.options.backend or settings.backend, turns=job.options.turns,
        on_turn=on_turn, should_stop=should_stop, target=job.target, on_stage=on_stage,
        core_id=core_id, platform=job_platform(job, settings),
        optimize_turns=job.options.optimize_turns, min_speedup=job.options.min_speedup,
        min_roofline_fraction=job.options.min_roofline_fraction))


def job_platform(job: Job, settings: Settings,
                 device: Callable[[], str | None] | None = None) -> str:
    """The generation this job is checked for: repo config, NKIBOT_TARGET, device, trn1.

    Runners on Trn2/Trn3 hosts run the same loop; only the generation differs.
    """
    return host_platform(job.options.platform, settings.target,
                         device or devices.device_generation)


async def fail_user(gw: GitHubGateway, run: CheckRun, job: Job, exc: TargetError) -> None:
    await run.complete("failure", error_output(job.target, exc.message, exc.hint))
    if job.trigger.kind == "dashboard":
        await report_row(gw, job, failure_update(job, exc.message, run.html_url))
        return
    await reply_once(gw, job, error_comment(job.target, exc.message, hint=exc.hint,
                                            check_run_url=run.html_url))


class JobRunner:
    """Runs one job through one installation's gateway; see the module docstring."""

    def __init__(self, gw: GitHubGateway, job: Job, settings: Settings, *, core_id: int | None,
                 should_stop: Callable[[], bool], releasing: Callable[[], bool]) -> None:
        self.gw, self.gh, self.job, self.settings = gw, gw.gh, job, settings
        self.core_id, self.should_stop, self.releasing = core_id, should_stop, releasing
        self.run = CheckRun(gw, job)
        self.timings = Timings()
        self.result: ConversionResult | None = None

    async def cancelled(self) -> None:
        await self.run.complete("cancelled", progress_output(
            self.job.target, None, elapsed_s=0, stage="cancelled by request"))

    async def execute(self) -> Outcome:
        job = self.job
        await self.run.start(progress_output(job.target, None, elapsed_s=0, stage="starting"))
        if job.trigger.kind == "dashboard":
            await report_row(self.gw, job, RowUpdate(job.target, status="running",
                                                     check_run_url=self.run.html_url))
        try:
            return await self._in_workspace()
        except TargetError as exc:
            log.info("user-level failure", job=job.id, reason=exc.message)
            await fail_user(self.gw, self.run, job, exc)
            return "done"

    async def _in_workspace(self) -> Outcome:
        job, t0 = self.job, time.monotonic()
        async with workspace(self.gh, job.repo, job.sha,
                             max_repo_mb=self.settings.max_repo_mb) as root:
            self.timings.add("fetch", time.monotonic() - t0)
            # The job's torch children fork from one warm sandbox that sees the checkout.
            with zygote.session(shown_folders(root), enabled=self.settings.warm_sandbox):
                prep, result = await self._convert(root)
            self.result = result
            if result.status == "cancelled" and self.releasing():
                return "release"
            prep.integrated = integration(prep, result, root)
        await self.finish(prep, result)
        return "done"

    async def _convert(self, root: Path) -> tuple[Prepared, ConversionResult]:
        job, t1 = self.job, time.monotonic()
        prep = await prepare(self.gw, job, root, self.settings)
        self.timings.add("discovery", time.monotonic() - t1)
        reporter = ProgressReporter(self.run.progress, job.target,
                                    interval_s=self.settings.check_run_update_interval_s,
                                    max_turns=job.options.turns or prep.task.max_turns)
        try:
            if job.options.reprofile_only:
                result = await self._reprofile(prep)
            else:
                result = await run_conversion(prep.task, self.settings, job,
                                              core_id=self.core_id, on_turn=reporter.on_turn,
                                              should_stop=self.should_stop,
                                              on_stage=self.timings.on_stage)
        finally:
            self.timings.end_stage()
            await reporter.close()
        return prep, result

    async def _reprofile(self, prep: Prepared) -> ConversionResult:
        from nkibot.convert.pipeline import kernel_path
        from nkibot.runner.reprofile import reprofile

        self.timings.on_stage("reference")
        name = PurePosixPath(kernel_path(prep.task)).name
        path = str(PurePosixPath(prep.config.output_dir.strip("/") or ".") / name)
        return await reprofile(self.gh, self.job, prep.task, self.settings, kernel_path=path,
                               core_id=self.core_id)

    async def finish(self, prep: Prepared, result: ConversionResult) -> None:
        job, t0 = self.job, time.monotonic()
        await self.run.ensure()
        pr_url, note = None, ""
        offset = header_line_count(result, sha=job.sha, repo=job.repo) if result.kernel else 0
        if result.status == "verified" and result.kernel is not None:
            plan = plan_publication(
                job, result, output_dir=prep.config.output_dir,
                reference_path=prep.reference_path, entry=prep.entry, kind=prep.kind,
                init_args=prep.task.init_args, integrated=prep.integrated,
                check_run_url=self.run.html_url)
            published = await Publisher(self.gh).publish(plan)
            if isinstance(published, LeftAlone):
                log.info("publication left alone", job=job.id, reason=published.reason)
                note = f"\n\n{published.reason}"
            else:
                pr_url = published.pr_url
        self.timings.add("publish", time.monotonic() - t0)
        await self.run.complete(conclusion(result), check_run_output(result, line_offset=offset))
        if job.trigger.kind == "dashboard":
            await report_row(self.gw, job, result_update(
                job, result, pr_url=pr_url, check_run_url=self.run.html_url))
            return
        await reply_once(self.gw, job, reply_comment(result, pr_url=pr_url,
                                                     check_run_url=self.run.html_url) + note)
