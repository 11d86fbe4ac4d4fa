"""Decisions of the Scope gate: `/nki scan`, the label with no targets, dashboard ticks.

Pure like the rest of `handlers/`: the dispatcher gathers facts, these functions say
what to do, and `bot/` and `github/` carry it out.
"""

from __future__ import annotations

from nkibot.config.repo import ConfigError, RepoConfig, TargetSpec
from nkibot.config.targets import (
    TargetError,
    is_cuda_target,
    reference_hint,
    validate_reference,
    validate_target,
)
from nkibot.handlers.dashboard import (
    DashboardChange,
    Row,
    RowUpdate,
    ScanRequest,
    is_dashboard,
    parse_board,
    tick_diff,
)
from nkibot.handlers.decision import Decision, Facts, Policy, ignore, owns
from nkibot.handlers.events import Incoming
from nkibot.handlers.jobs import build_jobs
from nkibot.jobs.model import Job, JobOptions

DISABLED = ("The conversion dashboard is turned off for this repository "
            "(`dashboard: false` in `.github/nki-bot.yml`).")


def _config(facts: Facts) -> RepoConfig:
    return facts.config if isinstance(facts.config, RepoConfig) else RepoConfig()


def screen_edit(inc: Incoming) -> bool:
    """An `issues.edited` worth gathering facts for: a dashboard body that changed."""
    return (inc.body_from is not None and inc.body_from != inc.issue_body
            and (is_dashboard(inc.issue_body) or is_dashboard(inc.body_from)))


def decide_scan(inc: Incoming, facts: Facts, globs: tuple[str, ...], react: bool) -> Decision:
    """Discover at the default branch's head (or the PR's head) and write the dashboard."""
    if not _config(facts).dashboard:
        return Decision("no_targets", reason="dashboard disabled", react=react, reply=DISABLED)
    if facts.sha is None:
        return ignore("no commit to scan (empty repository?)")
    ref = facts.head_ref if inc.is_pull_request and facts.head_ref else facts.default_branch
    request = ScanRequest(sha=facts.sha, ref=ref, globs=globs, reply_to=inc.issue_number,
                          config=_config(facts))
    return Decision("scan", reason=f"scan {ref} at {facts.sha[:12]}", react=react,
                    scan=request)


def missing_references(specs: list[TargetSpec], config: RepoConfig,
                       options: JobOptions) -> Decision | None:
    """A reply for CUDA targets that name no PyTorch reference, or None when all do."""
    missing = [s.target for s in specs if is_cuda_target(s.target)
               and not options.reference and s.target not in config.references]
    if not missing:
        return None
    text = "\n\n".join(reference_hint(t) for t in missing)
    return Decision("no_targets", reason=f"no reference for {', '.join(missing)}",
                    react=True, reply=f"nkibot needs a PyTorch reference first.\n\n{text}")


def decide_edit(inc: Incoming, facts: Facts, policy: Policy, allowed: bool) -> Decision:
    """Ticks and unticks on the dashboard; a refused editor's boxes are put back."""
    assert inc.issue_number is not None
    restore = DashboardChange(inc.issue_number)
    ticked, unticked = tick_diff(inc.body_from or "", inc.issue_body)
    if not ticked and not unticked:
        return ignore("dashboard edited without changing a box")
    if not allowed:
        return Decision("dashboard", reason=f"{inc.sender_login} may not convert: restored",
                        dashboard=restore)
    if isinstance(facts.config, ConfigError):
        return Decision("config_error", reason=facts.config.message(), dashboard=restore,
                        reply=f"nkibot could not use this repository's configuration: "
                              f"{facts.config.message()}")
    board = parse_board(inc.issue_body) or parse_board(inc.body_from or "")
    assert board is not None  # tick_diff found rows
    updates: list[RowUpdate] = []
    cancel: list[str] = []
    for target in unticked:
        row = board.row(target)
        if row is None or not row.job_id or not row.checked:
            continue
        if _own_job(inc, facts, row.job_id, target):
            cancel.append(row.job_id)
            updates.append(RowUpdate(target, status="cancelled", detail="unticked"))
        else:
            updates.append(RowUpdate(target, status="refused", detail=(
                "the job this row names is not one of this dashboard's; nothing cancelled")))
    jobs = _ticked_jobs(inc, facts, policy, ticked, updates)
    return Decision("enqueue" if jobs else "dashboard", reason=(
        f"dashboard: {len(jobs)} queued, {len(cancel)} cancelled"), jobs=jobs,
        cancel=tuple(cancel), dashboard=DashboardChange(inc.issue_number, tuple(updates)))


def _own_job(inc: Incoming, facts: Facts, job_id: str, target: str) -> bool:
    """A row's job id (hidden state anyone with edit rights can write) names a job of this
    repository's installation, recorded for this issue and this target."""
    return any(j.id == job_id and j.target == target and owns(inc, j)
               and j.trigger.issue_number == inc.issue_number for j in facts.jobs)


def _checked_row(name: str, row: Row | None,
                 config: RepoConfig) -> tuple[str, str | None] | RowUpdate:
    """The row's target and reference, validated here at the edge: both come from the
    issue body's hidden state, which anyone who can edit the issue can write."""
    try:
        target = validate_target(name)
        reference = (row.reference if row else None) or config.references.get(target)
        reference = validate_reference(reference) if reference is not None else None
    except TargetError as exc:
        return RowUpdate(name, status="refused", detail=f"not a valid target: {exc}"[:300])
    if is_cuda_target(target) and reference is None:
        return RowUpdate(name, status="needs a reference",
                         detail="name one under `references:` in the config")
    return target, reference


def _ticked_jobs(inc: Incoming, facts: Facts, policy: Policy, ticked: list[str],
                 updates: list[RowUpdate]) -> tuple[Job, ...]:
    config = _config(facts)
    board = parse_board(inc.issue_body)
    jobs: list[Job] = []
    for name in ticked:
        checked = _checked_row(name, board.row(name) if board else None, config)
        if isinstance(checked, RowUpdate):
            updates.append(checked)
            continue
        target, reference = checked
        if facts.sha is None:
            continue
        spec = next((t for t in config.targets if t.target == target), TargetSpec(target=target))
        (job,) = build_jobs(inc, facts, JobOptions(reference=reference), [spec],
                            policy.default_turns)
        if any(j.id == job.id for j in facts.jobs):
            continue  # this very edit was acted on before (a replayed body): leave the row
        job = job.model_copy(update={"trigger": job.trigger.model_copy(
            update={"kind": "dashboard"})})
        jobs.append(job)
        updates.append(RowUpdate(name, status="queued", job_id=job.id, detail=""))
    return tuple(jobs)
