"""A flat summary of the webhook events nkibot acts on, read from githubkit's typed models.

Only what the decisions need is kept, so `decide` can be tested with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from githubkit.utils import Unset

Kind = Literal["comment", "label", "check_run", "issue_edit", "other"]


@dataclass(frozen=True)
class Incoming:
    event: str
    action: str
    delivery_id: str
    kind: Kind
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
    #: check_run events
    check_run_id: int | None = None
    check_run_app_id: int | None = None
    external_id: str | None = None
    requested_action: str | None = None

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]


def _get(obj: Any, *path: str) -> Any:
    """Follow attributes, treating githubkit's UNSET and None alike as missing."""
    for name in path:
        if obj is None or isinstance(obj, Unset):
            return None
        obj = getattr(obj, name, None)
    return None if isinstance(obj, Unset) else obj


def summarize(event: str, delivery_id: str, parsed: Any) -> Incoming:
    """Flatten a githubkit webhook model; events we do not act on become kind `other`."""
    action = str(_get(parsed, "action") or "")
    common: dict[str, Any] = {
        "event": event, "action": action, "delivery_id": delivery_id,
        "repo": _get(parsed, "repository", "full_name") or "",
        "installation_id": _get(parsed, "installation", "id"),
        "sender_login": _get(parsed, "sender", "login") or "",
        "sender_type": _get(parsed, "sender", "type") or "User",
    }
    if event in ("issue_comment", "issues"):
        common.update(
            issue_number=_get(parsed, "issue", "number"),
            is_pull_request=_get(parsed, "issue", "pull_request") is not None,
            issue_body=_get(parsed, "issue", "body") or "",
        )
    if event == "issue_comment":
        return Incoming(kind="comment", comment_id=_get(parsed, "comment", "id"),
                        comment_body=_get(parsed, "comment", "body") or "", **common)
    if event == "issues" and action == "edited":
        return Incoming(kind="issue_edit", body_from=_get(parsed, "changes", "body", "from_"),
                        **common)
    if event == "issues":
        return Incoming(kind="label", label=_get(parsed, "label", "name"), **common)
    if event == "pull_request":
        pr = _get(parsed, "pull_request")
        return Incoming(
            kind="label", label=_get(parsed, "label", "name"),
            issue_number=_get(pr, "number"), is_pull_request=True,
            issue_body=_get(pr, "body") or "", head_sha=_get(pr, "head", "sha"),
            head_ref=_get(pr, "head", "ref"), head_repo=_get(pr, "head", "repo", "full_name"),
            base_ref=_get(pr, "base", "ref"), **common,
        )
    if event == "check_run":
        run = _get(parsed, "check_run")
        return Incoming(
            kind="check_run", check_run_id=_get(run, "id"),
            check_run_app_id=_get(run, "app", "id"), external_id=_get(run, "external_id"),
            head_sha=_get(run, "head_sha"),
            requested_action=_get(parsed, "requested_action", "identifier"), **common,
        )
    return Incoming(kind="other", **common)
