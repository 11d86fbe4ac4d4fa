"""Gather the facts a decision needs: permission, repo config, the SHA to run on, known jobs."""

from __future__ import annotations

import dataclasses

import anyio

from nkibot.config.repo import RepoConfig, load_repo_config
from nkibot.github.gateway import GitHubGateway
from nkibot.handlers.decide import Needs
from nkibot.handlers.decision import Facts, Policy, owns
from nkibot.handlers.events import Incoming
from nkibot.handlers.policy import may_trigger, required_permission
from nkibot.jobs.model import Job
from nkibot.jobs.state import JobStateStore


async def gather(gw: GitHubGateway, inc: Incoming, needs: Needs, policy: Policy,
                 state: JobStateStore) -> Facts:
    permission = await gw.permission(inc.repo, inc.sender_login)
    if not may_trigger(permission, required_permission(policy, None)):
        # Refused whatever the repository says (a repo config can only raise the bar).
        return Facts(permission=permission)
    owner, _, name = inc.repo.partition("/")
    config = await load_repo_config(gw.read_file, owner, name) if needs.config else RepoConfig()
    facts = Facts(permission=permission, config=config)
    if needs.sha:
        facts = await _with_sha(gw, inc, facts)
    jobs: list[Job] = []
    if needs.issue_jobs and inc.issue_number is not None:
        jobs = await anyio.to_thread.run_sync(
            lambda: state.find(inc.repo, issue_number=inc.issue_number))
    if needs.check_run_job and inc.external_id:
        found = await anyio.to_thread.run_sync(state.get, inc.external_id)
        jobs = [found] if found is not None else []
    if needs.suite_jobs and inc.head_sha:
        jobs = [j for j in await anyio.to_thread.run_sync(state.find, inc.repo)
                if j.sha == inc.head_sha]
    # Only the event's own installation's jobs in its own repository are facts about it.
    return dataclasses.replace(facts, jobs=tuple(j for j in jobs if owns(inc, j)))


async def _with_sha(gw: GitHubGateway, inc: Incoming, facts: Facts) -> Facts:
    if inc.kind in ("check_run", "check_suite"):
        return dataclasses.replace(facts, sha=inc.head_sha)
    if inc.is_pull_request and inc.head_sha and inc.base_ref:
        return dataclasses.replace(facts, sha=inc.head_sha, head_ref=inc.head_ref,
                                   head_repo=inc.head_repo, base_ref=inc.base_ref,
                                   default_branch=inc.base_ref)
    if inc.is_pull_request and inc.issue_number is not None:
        head = await gw.pull_head(inc.repo, inc.issue_number)
        return dataclasses.replace(facts, sha=head.sha, head_ref=head.ref, head_repo=head.repo,
                                   base_ref=head.base_ref, default_branch=head.base_ref)
    branch, sha = await gw.default_branch_head(inc.repo)
    return dataclasses.replace(facts, sha=sha, default_branch=branch)
