"""What to do about one delivery: the output of `decide`, executed by the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nkibot.config.repo import ConfigError, RepoConfig
from nkibot.handlers.dashboard import DashboardChange, ScanRequest
from nkibot.handlers.events import Incoming
from nkibot.jobs.model import Job

DecisionKind = Literal[
    "ignore", "help", "usage", "denied", "config_error", "no_targets",
    "enqueue", "retry", "cancel", "scan", "dashboard",
]


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    #: Why (logged for every decision; the whole story for `ignore`).
    reason: str = ""
    #: A comment to post on the issue or PR (None: no comment).
    reply: str | None = None
    #: Put an `eyes` reaction on the triggering comment.
    react: bool = False
    #: Jobs to enqueue, each with a `queued` check run (`enqueue`, `retry`).
    jobs: tuple[Job, ...] = ()
    #: Job ids to mark cancelled (`cancel`).
    cancel: tuple[str, ...] = ()
    #: Discover and write the conversion dashboard (`scan`).
    scan: ScanRequest | None = None
    #: Rows of the dashboard issue to update (`dashboard`, and with `enqueue`/`cancel`).
    dashboard: DashboardChange | None = None


def ignore(reason: str) -> Decision:
    return Decision("ignore", reason=reason)


def owns(inc: Incoming, job: Job) -> bool:
    """Whether `job` belongs to the event's own installation and repository.

    Every action an event takes on a recorded job is scoped by this: a job id read from
    text (a dashboard's hidden state, an external id) is never trusted on its own."""
    return job.repo == inc.repo and job.installation_id == inc.installation_id


@dataclass(frozen=True)
class Facts:
    """What the dispatcher read from GitHub and the job store before deciding."""

    permission: str | None = None
    config: RepoConfig | ConfigError = field(default_factory=RepoConfig)
    #: The commit to run on: the PR head, or the default branch head for issues.
    sha: str | None = None
    default_branch: str = "main"
    head_ref: str | None = None
    head_repo: str | None = None
    base_ref: str | None = None
    #: Recorded jobs of this issue/PR (retry, cancel) or of the check run (its external id).
    jobs: tuple[Job, ...] = ()


@dataclass(frozen=True)
class Policy:
    """Operator settings that shape decisions (from Settings)."""

    allowed_owners: tuple[str, ...] = ()
    trigger_label: str = "nki-candidate"
    min_permission: str = "write"
    app_id: int | None = None
    default_turns: int = 10
