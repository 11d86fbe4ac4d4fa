"""A flat summary of the webhook events nkibot acts on (built by `intake.read_event`).

Only what the decisions need is kept, so `decide` can be tested with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["comment", "label", "check_run", "check_suite", "issue_edit", "other"]


@dataclass(frozen=True)
class Incoming:
    event: str
    action: str
    delivery_id: str
    kind: Kind
    #: What identifies the event inside the signed body (`intake.event_key`): job ids and
    #: reply markers derive from it, never from the unsigned X-GitHub-Delivery header,
    #: so a signed body replayed under a fresh delivery id repeats nothing.
    event_key: str = ""
    repo: str = ""
    installation_id: int | None = None
    sender_login: str = ""
    sender_type: str = "User"
    issue_number: int | None = None
    is_pull_request: bool = False
    issue_body: str = ""
    comment_id: int | None = None
    comment_body: str = ""
    label: str | None = None
    #: issues.edited: the body before the edit (`changes.body.from`), when it changed.
    body_from: str | None = None
    #: From pull_request events (issue comments on PRs carry only the number).
    head_sha: str | None = None
    head_ref: str | None = None
    head_repo: str | None = None
    base_ref: str | None = None
    #: check_run events (check_suite events fill `check_suite_id` instead)
    check_run_id: int | None = None
    check_suite_id: int | None = None
    #: The App that owns the check run or suite.
    check_run_app_id: int | None = None
    external_id: str | None = None
    requested_action: str | None = None
    #: A field the decision needs that the payload lacks (the delivery is then dropped).
    missing: str | None = None

    @property
    def identity(self) -> str:
        """The replay-proof identity of the event (the delivery id only for hand-built ones)."""
        return self.event_key or self.delivery_id

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]
