"""The dashboard issue on GitHub: create it once, rewrite only its section, update rows.

The bodies are built by the pure functions in `nkibot.handlers.dashboard`; this module
reads the current body just before writing, so an edit made meanwhile (a human note, a
row another job finished) is kept rather than overwritten by an older copy.
"""

from __future__ import annotations

import structlog
from githubkit.exception import GitHubException

from nkibot.github.gateway import GitHubGateway
from nkibot.handlers.dashboard import (
    START,
    TITLE,
    Board,
    RowUpdate,
    apply_updates,
    merge_scan,
    new_issue_body,
    parse_board,
    render_section,
    splice,
)
from nkibot.jobs.model import Job
from nkibot.results import ConversionResult, ProfileResult

log = structlog.get_logger("nkibot.github.dashboard")
#: Keys of the simulator's stats that carry the cost model's time estimate, in µs.
_MODEL_TIME_KEYS = ("estimated_us", "model_us", "modelled_us", "latency_us")


async def write_board(gw: GitHubGateway, repo: str, board: Board) -> tuple[int, bool]:
    """(issue number, created) after creating or updating the one dashboard of `repo`."""
    existing = await gw.find_open_issue(repo, START)
    if existing is not None:
        number, body = existing
        merged = merge_scan(parse_board(body), board)
        new = splice(body, render_section(merged))
        if new != body:
            await gw.set_issue_body(repo, number, new)
        return number, False
    number, node_id = await gw.create_issue(repo, TITLE, new_issue_body(board))
    try:
        await gw.pin_issue(node_id)
    except GitHubException as exc:  # pinning is a courtesy: at most 3 pins, or no GraphQL
        log.warning("could not pin the dashboard", repo=repo, issue=number, error=str(exc))
    return number, True


async def update_rows(gw: GitHubGateway, repo: str, number: int,
                      updates: tuple[RowUpdate, ...]) -> bool:
    """Apply row updates to the dashboard issue `number`; True when the body changed."""
    body = await gw.issue_body(repo, number)
    new = apply_updates(body, updates)
    if new == body:
        return False
    await gw.set_issue_body(repo, number, new)
    return True


async def report_row(gw: GitHubGateway, job: Job, update: RowUpdate) -> None:
    """A dashboard-ticked job reports on its row instead of commenting on the issue."""
    if job.trigger.issue_number is not None:
        await update_rows(gw, job.repo, job.trigger.issue_number, (update,))


def time_of(profile: ProfileResult | None) -> tuple[str | None, float | None]:
    """(text, µs) of a result's kernel time, saying where it came from; (None, None) if none."""
    if profile is None:
        return None, None
    if profile.hardware and profile.kernel is not None:
        us = profile.kernel.p50_us
        return f"{us:.1f} µs p50 ({profile.measured_on})", us
    for key in _MODEL_TIME_KEYS:
        value = profile.sim_stats.get(key)
        if isinstance(value, int | float):
            return f"{float(value):.1f} µs (model estimate)", float(value)
    return None, None


def result_update(job: Job, result: ConversionResult, *, pr_url: str | None,
                  check_run_url: str | None) -> RowUpdate:
    """The row's status after a finished conversion."""
    text, us = time_of(result.profile)
    ref = result.profile.torch_device if result.profile and result.profile.hardware else None
    if ref is not None:
        # Rows rank by the PyTorch reference's time where it was measured: the time to win.
        text = f"{text or 'kernel: no time'}; PyTorch {ref.p50_us:.1f} µs p50"
        us = ref.p50_us
    tokens = result.tokens.input + result.tokens.output
    detail = f"{result.turns} turn{'s' if result.turns != 1 else ''}, {tokens} tokens"
    return RowUpdate(job.target, status=str(result.status), job_id=job.id, detail=detail,
                     check_run_url=check_run_url, pr_url=pr_url, time=text, time_us=us)


def failure_update(job: Job, message: str, check_run_url: str | None) -> RowUpdate:
    return RowUpdate(job.target, status="failed", job_id=job.id, detail=message[:200],
                     check_run_url=check_run_url)
