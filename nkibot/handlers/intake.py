"""Raw webhook bytes -> `Incoming`, read leniently: GitHub adds, renames and omits fields.

The model below declares only what a decision reads, every field optional, extra fields
allowed and never validated. A field of the wrong type reads as absent instead of failing
the whole payload, so a schema drift on a field nobody uses cannot make the bot deaf
(githubkit's strict webhook models did: its PR #118 is a production app made deaf so).
A payload is dropped only when a field the decision needs is absent; `Incoming.missing`
names it, and the dispatcher logs and counts it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler
from pydantic.functional_validators import WrapValidator

from nkibot.handlers.events import Incoming, Kind


def _or_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A value that does not fit its field is treated as absent, not as a bad payload."""
    try:
        return handler(value)
    except ValidationError:
        return None


_Loose = WrapValidator(_or_none)
Int = Annotated[int | None, _Loose]
Str = Annotated[str | None, _Loose]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Account(_Lenient):
    login: Str = None
    type: Str = None


class _Repo(_Lenient):
    full_name: Str = None


class _Id(_Lenient):
    id: Int = None


class _Label(_Lenient):
    name: Str = None


class _Issue(_Lenient):
    number: Int = None
    body: Str = None
    #: Present (any value) only on issues that are pull requests.
    pull_request: Any = None


class _Comment(_Lenient):
    id: Int = None
    body: Str = None


class _Ref(_Lenient):
    sha: Str = None
    ref: Str = None
    repo: Annotated[_Repo | None, _Loose] = None


class _Pull(_Lenient):
    number: Int = None
    body: Str = None
    head: Annotated[_Ref | None, _Loose] = None
    base: Annotated[_Ref | None, _Loose] = None


class _Check(_Lenient):
    id: Int = None
    external_id: Str = None
    head_sha: Str = None
    app: Annotated[_Id | None, _Loose] = None


class _Action(_Lenient):
    identifier: Str = None


class _From(_Lenient):
    from_: Annotated[str | None, _Loose] = Field(default=None, alias="from")


class _Changes(_Lenient):
    body: Annotated[_From | None, _Loose] = None


class Payload(_Lenient):
    """The fields of every subscribed event that a decision reads; nothing else is checked."""

    action: Str = None
    repository: Annotated[_Repo | None, _Loose] = None
    installation: Annotated[_Id | None, _Loose] = None
    sender: Annotated[_Account | None, _Loose] = None
    issue: Annotated[_Issue | None, _Loose] = None
    comment: Annotated[_Comment | None, _Loose] = None
    label: Annotated[_Label | None, _Loose] = None
    pull_request: Annotated[_Pull | None, _Loose] = None
    check_run: Annotated[_Check | None, _Loose] = None
    check_suite: Annotated[_Check | None, _Loose] = None
    requested_action: Annotated[_Action | None, _Loose] = None
    #: issues.edited: what the edit changed (the dashboard's ticks are read from the body).
    changes: Annotated[_Changes | None, _Loose] = None


KINDS: dict[str, Kind] = {"issue_comment": "comment", "issues": "label",
                          "pull_request": "label", "check_run": "check_run",
                          "check_suite": "check_suite"}
#: The actions decisions act on, per event; any other action is screened out by name.
ACTED_ON: dict[str, frozenset[str]] = {
    "issue_comment": frozenset({"created"}),
    "issues": frozenset({"labeled", "edited"}),
    "pull_request": frozenset({"labeled"}),
    "check_run": frozenset({"rerequested", "requested_action"}),
    "check_suite": frozenset({"rerequested"}),
}
_COMMON = ("repository.full_name", "installation.id", "sender.login")
#: Per (event, action): the dotted fields without which no decision can be made.
NEEDED: dict[tuple[str, str], tuple[str, ...]] = {
    ("issue_comment", "created"): ("issue.number", "comment.body"),
    ("issues", "labeled"): ("issue.number", "label.name"),
    # Without the new body a tick diff would read every box as unticked and cancel jobs.
    ("issues", "edited"): ("issue.number", "issue.body"),
    ("pull_request", "labeled"): ("pull_request.number", "label.name"),
    ("check_run", "rerequested"): ("check_run.id", "check_run.app.id",
                                   "check_run.external_id", "check_run.head_sha"),
    ("check_run", "requested_action"): ("check_run.id", "check_run.app.id",
                                        "check_run.external_id", "check_run.head_sha",
                                        "requested_action.identifier"),
    ("check_suite", "rerequested"): ("check_suite.id", "check_suite.app.id",
                                     "check_suite.head_sha"),
}


def _at(obj: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        if obj is None:
            return None
        obj = getattr(obj, name, None)
    return obj


def missing_field(event: str, action: str, payload: Payload) -> str | None:
    """The first field a decision on (event, action) needs that the payload lacks."""
    needed = NEEDED.get((event, action))
    if needed is None:
        return None
    return next((f for f in (*_COMMON, *needed) if _at(payload, f) in (None, "")), None)


def parse_payload(body: bytes) -> Payload | None:
    """The lenient model of `body`, or None when it is not a JSON object at all."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return Payload.model_validate(data)
    except (ValidationError, RecursionError):  # only a top level that is not an object
        return None


def read_event(event: str, delivery_id: str, body: bytes) -> Incoming:
    """One delivery as the decisions see it; never raises on any body.

    Events or actions nkibot does not act on come back as kind `other` or with their
    action, for `screen` to ignore by name; `missing` names an absent needed field.
    """
    payload = parse_payload(body)
    if payload is None:
        return Incoming(event=event, action="", delivery_id=delivery_id, kind="other",
                        missing="body (not a JSON object)")
    action = payload.action or ""
    kind: Kind = KINDS.get(event, "other")
    if event == "issues" and action == "edited":
        kind = "issue_edit"
    fields = _common(payload) | _specific(event, payload)
    missing = missing_field(event, action, payload) if action in ACTED_ON.get(event, ()) else None
    return Incoming(event=event, action=action, delivery_id=delivery_id, kind=kind,
                    missing=missing, event_key=event_key(event, body, fields), **fields)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def event_key(event: str, body: bytes, fields: dict[str, Any]) -> str:
    """The event's identity from what the signature covers (the body), not from headers.

    A comment is its id plus its command (an edit is never acted on, so the pair names one
    request for good); a label event, a dashboard edit or a check-run request is its whole
    signed body, which GitHub stamps with the issue's `updated_at`.
    """
    if event == "issue_comment" and fields.get("comment_id") is not None:
        command = str(fields.get("comment_body") or "").encode()
        return f"comment:{fields['comment_id']}:{_digest(command)}"
    return f"{event}:{_digest(body)}"


def _common(p: Payload) -> dict[str, Any]:
    return {"repo": _at(p, "repository.full_name") or "",
            "installation_id": _at(p, "installation.id"),
            "sender_login": _at(p, "sender.login") or "",
            "sender_type": _at(p, "sender.type") or "User"}


def _specific(event: str, p: Payload) -> dict[str, Any]:
    if event in ("issue_comment", "issues"):
        issue = p.issue
        out: dict[str, Any] = {
            "issue_number": _at(issue, "number"), "issue_body": _at(issue, "body") or "",
            "is_pull_request": issue is not None and issue.pull_request is not None,
            "label": _at(p, "label.name")}
        if event == "issue_comment":
            out |= {"comment_id": _at(p, "comment.id"),
                    "comment_body": _at(p, "comment.body") or ""}
        if event == "issues" and p.action == "edited":
            out |= {"body_from": _at(p, "changes.body.from_")}
        return out
    if event == "pull_request":
        pr = p.pull_request
        return {"label": _at(p, "label.name"), "issue_number": _at(pr, "number"),
                "is_pull_request": True, "issue_body": _at(pr, "body") or "",
                "head_sha": _at(pr, "head.sha"), "head_ref": _at(pr, "head.ref"),
                "head_repo": _at(pr, "head.repo.full_name"), "base_ref": _at(pr, "base.ref")}
    if event in ("check_run", "check_suite"):
        run = p.check_run if event == "check_run" else p.check_suite
        key = "check_run_id" if event == "check_run" else "check_suite_id"
        return {key: _at(run, "id"), "check_run_app_id": _at(run, "app.id"),
                "external_id": _at(run, "external_id"), "head_sha": _at(run, "head_sha"),
                "requested_action": _at(p, "requested_action.identifier")}
    return {}
