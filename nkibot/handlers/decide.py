"""Event + facts -> Decision. `screen` needs no facts; `decide` gets what `needs` asks for."""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.config.repo import ConfigError, RepoConfig, TargetSpec
from nkibot.handlers.commands import USAGE, Command, CommandError, parse_comment
from nkibot.handlers.decision import Decision, Facts, Policy, ignore
from nkibot.handlers.events import Incoming
from nkibot.handlers.issue_body import targets_from_issue_body
from nkibot.handlers.jobs import build_jobs, retried
from nkibot.handlers.policy import (
    bot_reason,
    denied_text,
    may_trigger,
    owner_allowed,
    required_permission,
)
from nkibot.handlers.scan import decide_edit, decide_scan, missing_references, screen_edit

CHECK_ACTIONS = ("retry", "retry_more_turns", "reprofile")
HELP = (
    "**nkibot** converts PyTorch `nn.Module`s and `@triton.jit` kernels into verified NKI "
    "kernels for AWS Trainium.\n\n```\n" + USAGE + "\n```\n\nWith no target, an issue's body "
    "(`path::Name` lines or a yaml block) or the PR repo's `.github/nki-bot.yml` `targets` "
    "are used. `/nki scan` lists what is worth converting in the \"NKI conversion "
    "dashboard\" issue, where ticking a box converts that target."
)


@dataclass(frozen=True)
class Needs:
    """Which facts the dispatcher must gather before `decide`."""

    sha: bool = False
    config: bool = False
    issue_jobs: bool = False
    check_run_job: bool = False
    #: Every recorded job on the check suite's head SHA (Re-run all checks).
    suite_jobs: bool = False


def screen(inc: Incoming, policy: Policy) -> Decision | Needs:
    """Drop what nkibot never acts on, before any API call; else say which facts to fetch."""
    if inc.kind == "other":
        return ignore(f"event {inc.event}.{inc.action} is not acted on")
    if inc.missing is not None:
        return ignore(f"payload of {inc.event}.{inc.action} lacks {inc.missing}")
    if (why := bot_reason(inc)) is not None:
        return ignore(why)
    if not inc.repo or inc.installation_id is None:
        return ignore("no repository or installation in the payload")
    if not owner_allowed(inc, policy):
        return ignore(f"owner {inc.owner} is not in NKIBOT_ALLOWED_OWNERS")
    if inc.kind == "comment":
        return _screen_comment(inc)
    if inc.kind == "issue_edit":
        if not screen_edit(inc):
            return ignore("issue edit that changes no dashboard box")
        # The issue's recorded jobs: an untick cancels only a job found there.
        return Needs(sha=True, config=True, issue_jobs=True)
    if inc.kind == "label":
        if inc.action != "labeled":
            return ignore(f"action {inc.event}.{inc.action} is not acted on")
        if (inc.label or "").lower() != policy.trigger_label.lower():
            return ignore(f"label {inc.label!r} is not the trigger label")
        return Needs(sha=True, config=True)
    if inc.kind == "check_suite":
        return _screen_suite(inc, policy)
    if inc.action not in ("rerequested", "requested_action"):
        return ignore(f"action check_run.{inc.action} is not acted on")
    if policy.app_id is None or inc.check_run_app_id != policy.app_id:
        return ignore("check run belongs to another app")
    if inc.action == "requested_action" and inc.requested_action not in CHECK_ACTIONS:
        return ignore(f"unknown requested action {inc.requested_action!r}")
    return Needs(sha=True, config=True, check_run_job=True)


def _screen_suite(inc: Incoming, policy: Policy) -> Decision | Needs:
    if inc.action != "rerequested":
        return ignore(f"action check_suite.{inc.action} is not acted on")
    if policy.app_id is None or inc.check_run_app_id != policy.app_id:
        return ignore("check suite belongs to another app")
    return Needs(sha=True, config=True, suite_jobs=True)


def _screen_comment(inc: Incoming) -> Decision | Needs:
    if inc.action != "created":
        return ignore(f"comment {inc.action}: only new comments count")
    cmd = parse_comment(inc.comment_body)
    if cmd is None:
        return ignore("no /nki command in the comment")
    if isinstance(cmd, CommandError) or cmd.verb == "help":
        return Needs()
    if cmd.verb in ("convert", "scan"):
        return Needs(sha=True, config=True)
    return Needs(sha=cmd.verb == "retry", config=cmd.verb == "retry", issue_jobs=True)


def decide(inc: Incoming, facts: Facts, policy: Policy) -> Decision:
    """The decision for an event that passed `screen`, given the facts it asked for."""
    repo_min = facts.config.min_permission if isinstance(facts.config, RepoConfig) else None
    need = required_permission(policy, repo_min)
    if inc.kind == "issue_edit":
        return decide_edit(inc, facts, policy, may_trigger(facts.permission, need))
    if not may_trigger(facts.permission, need):
        return Decision("denied", reason=f"{inc.sender_login} has {facts.permission}, needs "
                        f"{need}", reply=denied_text(inc.sender_login, need))
    if inc.kind == "comment":
        return _decide_comment(inc, facts, policy)
    if isinstance(facts.config, ConfigError):
        return _config_error(facts.config)
    if inc.kind == "label":
        return _enqueue(inc, facts, policy, Command("convert"), react=False)
    if inc.kind == "check_suite":
        if not facts.jobs:
            return ignore(f"no nkibot job on the suite's commit {inc.head_sha}")
        return _retry_latest(inc, facts, policy)
    job = next((j for j in facts.jobs if j.id == inc.external_id), None)
    if job is None:
        return ignore(f"check run {inc.check_run_id} has no recorded job {inc.external_id!r}")
    action = inc.requested_action if inc.action == "requested_action" else "retry"
    new = retried(job, inc, facts, action or "retry", policy.default_turns)
    return Decision("retry", reason=f"check run action {action}", jobs=(new,))


def _decide_comment(inc: Incoming, facts: Facts, policy: Policy) -> Decision:
    cmd = parse_comment(inc.comment_body)
    if cmd is None:
        return ignore("no /nki command in the comment")
    if isinstance(cmd, CommandError):
        text = f"I could not read that command: {cmd.reason}.\n\nUsage:\n```\n{USAGE}\n```"
        return Decision("usage", reason=cmd.reason, reply=text, react=True)
    if cmd.verb == "help":
        return Decision("help", reason="help asked", reply=HELP, react=True)
    if cmd.verb == "cancel":
        chosen = [j for j in facts.jobs if not cmd.targets or j.target in cmd.targets]
        if not chosen:
            return Decision("cancel", reason="nothing to cancel", react=True,
                            reply="There is no nkibot job to cancel here.")
        names = ", ".join(sorted({f"`{j.target}`" for j in chosen}))
        return Decision("cancel", reason=f"{len(chosen)} jobs", react=True,
                        cancel=tuple(j.id for j in chosen), reply=f"Cancelled: {names}.")
    if isinstance(facts.config, ConfigError):
        return _config_error(facts.config)
    if cmd.verb == "retry":
        return _retry_latest(inc, facts, policy)
    if cmd.verb == "scan":
        return decide_scan(inc, facts, cmd.targets, react=True)
    return _enqueue(inc, facts, policy, cmd, react=True)


def _retry_latest(inc: Incoming, facts: Facts, policy: Policy) -> Decision:
    latest: dict[str, object] = {}
    for job in sorted(facts.jobs, key=lambda j: j.generation):
        latest[job.target] = job
    if not latest:
        return Decision("no_targets", reason="nothing to retry", react=True,
                        reply="There is no earlier nkibot job here to retry.")
    jobs = tuple(retried(j, inc, facts, "retry", policy.default_turns)  # type: ignore[arg-type]
                 for j in latest.values())
    return Decision("retry", reason=f"{len(jobs)} targets", react=True, jobs=jobs)


def _config_error(err: ConfigError) -> Decision:
    return Decision("config_error", reason=err.message(), reply=(
        f"nkibot could not use this repository's configuration: {err.message()}"
    ))


def _targets(inc: Incoming, facts: Facts, cmd: Command) -> list[TargetSpec] | str:
    if cmd.targets:
        return [TargetSpec(target=t) for t in cmd.targets]
    if not inc.is_pull_request:
        found = targets_from_issue_body(inc.issue_body)
        if found:
            return found
    config = facts.config if isinstance(facts.config, RepoConfig) else RepoConfig()
    return list(config.targets)


def _enqueue(inc: Incoming, facts: Facts, policy: Policy, cmd: Command, react: bool) -> Decision:
    specs = _targets(inc, facts, cmd)
    if specs == [] and inc.kind == "label" and not inc.is_pull_request:
        return decide_scan(inc, facts, (), react=False)  # the Scope gate: pick from a scan
    if isinstance(specs, str) or not specs:
        why = specs if isinstance(specs, str) else "no target was named"
        return Decision("no_targets", reason=why, react=react, reply=(
            f"nkibot has nothing to convert: {why}. Name targets as `path/to/file.py::Name` "
            "in the command, in the issue body, or under `targets:` in `.github/nki-bot.yml`."
        ))
    config = facts.config if isinstance(facts.config, RepoConfig) else RepoConfig()
    if (refused := missing_references(specs, config, cmd.options)) is not None:
        return refused
    if facts.sha is None:
        return ignore("no commit to run on (empty repository?)")
    jobs = build_jobs(inc, facts, cmd.options, specs, policy.default_turns)
    return Decision("enqueue", reason=f"{len(jobs)} targets", react=react, jobs=jobs)
