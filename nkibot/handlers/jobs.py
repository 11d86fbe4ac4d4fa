"""Build Jobs: deterministic ids, options layered config < command, retries as generations."""

from __future__ import annotations

from nkibot.config.repo import RepoConfig, TargetSpec
from nkibot.config.targets import ShapeOverride
from nkibot.handlers.decision import Facts
from nkibot.handlers.events import Incoming
from nkibot.jobs.model import Job, JobOptions, Trigger, job_id

MAX_TURNS = 50


def merged_options(config: RepoConfig, options: JobOptions) -> JobOptions:
    """Command options win over the repository's defaults, field by field."""
    return JobOptions(
        turns=options.turns or config.turns,
        model=options.model or config.model,
        backend=options.backend or config.backend,
        platform=options.platform or config.target,
        atol=options.atol if options.atol is not None else config.tolerances.atol,
        rtol=options.rtol if options.rtol is not None else config.tolerances.rtol,
        shapes=list(options.shapes),
        reprofile_only=options.reprofile_only,
        reference=options.reference,
        optimize_turns=(options.optimize_turns if options.optimize_turns is not None
                        else config.optimize_turns),
        min_speedup=options.min_speedup or config.requirements.min_speedup,
        min_roofline_fraction=(options.min_roofline_fraction
                               or config.requirements.min_roofline_fraction),
    )


def trigger_of(inc: Incoming, facts: Facts) -> Trigger:
    kind = {"comment": "comment", "label": "label"}.get(inc.kind, "check_run")
    return Trigger(
        kind=kind,
        delivery_id=inc.delivery_id, event_key=inc.identity, sender=inc.sender_login,
        issue_number=inc.issue_number, is_pull_request=inc.is_pull_request,
        comment_id=inc.comment_id,
        head_ref=facts.head_ref or inc.head_ref, head_repo=facts.head_repo or inc.head_repo,
        base_ref=facts.base_ref or inc.base_ref,
    )


def make_job(repo: str, installation_id: int, spec_target: str, sha: str, trigger: Trigger,
             options: JobOptions, default_branch: str, generation: int = 0,
             issue_shapes: list[ShapeOverride] | None = None) -> Job:
    # The event's signed identity makes the id stable across redeliveries and replays of
    # the same event (whatever X-GitHub-Delivery says) and distinct for a new request;
    # the generation separates retries.
    ref = f"{trigger.event_key or trigger.delivery_id}:g{generation}"
    return Job(
        id=job_id(repo, spec_target, sha, ref), repo=repo, installation_id=installation_id,
        target=spec_target, sha=sha, trigger=trigger, options=options,
        default_branch=default_branch, generation=generation,
        issue_shapes=issue_shapes or [],
    )


def build_jobs(inc: Incoming, facts: Facts, options: JobOptions, specs: list[TargetSpec],
               default_turns: int) -> tuple[Job, ...]:
    config = facts.config if isinstance(facts.config, RepoConfig) else RepoConfig()
    opts = merged_options(config, options)
    if opts.turns is None:
        opts = opts.model_copy(update={"turns": default_turns})
    trigger = trigger_of(inc, facts)
    assert facts.sha is not None and inc.installation_id is not None
    return tuple(
        make_job(inc.repo, inc.installation_id, spec.target, facts.sha, trigger, opts,
                 facts.default_branch, issue_shapes=list(spec.shapes))
        for spec in specs
    )


def retried(job: Job, inc: Incoming, facts: Facts, action: str, default_turns: int) -> Job:
    """The next generation of `job`: same target and thread, the newest SHA, adjusted options."""
    options = job.options.model_copy()
    if action == "retry_more_turns":
        # The check run's button says "Retry +5 turns": add five, capped.
        options.turns = min(MAX_TURNS, (options.turns or default_turns) + 5)
    options.reprofile_only = action == "reprofile"
    old = job.trigger
    trigger = old.model_copy(update={
        # A dashboard job's retry still reports on its dashboard row.
        "kind": "dashboard" if old.kind == "dashboard" else (
            "comment" if inc.kind == "comment" else "check_run"),
        "delivery_id": inc.delivery_id, "event_key": inc.identity,
        "sender": inc.sender_login,
        "comment_id": inc.comment_id if inc.kind == "comment" else old.comment_id,
    })
    # Reprofiling measures the kernel already published for the old commit.
    sha = job.sha if action == "reprofile" else (facts.sha or job.sha)
    return make_job(job.repo, job.installation_id, job.target, sha, trigger, options,
                    job.default_branch, job.generation + 1, list(job.issue_shapes))
