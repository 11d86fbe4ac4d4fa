"""A webhook delivery: checked from raw headers and body (pure), and framed for the inbox."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from githubkit.webhooks import verify

#: Events the dispatcher reads; anything else is acknowledged and dropped.
STORED_EVENTS = frozenset({
    "issue_comment", "issues", "pull_request", "check_run", "check_suite",
    "installation", "installation_repositories",
})
_EVENT = re.compile(r"^[a-z_]{1,64}$")
_DELIVERY = re.compile(r"^[A-Za-z0-9\-_.:]{1,128}$")


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


@dataclass(frozen=True)
class Delivery:
    event: str
    delivery_id: str
    body: bytes
    hook_id: str = ""
    received_at: float = 0.0

    def encode(self) -> bytes:
        """One JSON header line, a newline, then the raw body (no re-encoding of big bodies)."""
        head = json.dumps({"event": self.event, "delivery": self.delivery_id,
                           "hook_id": self.hook_id, "received_at": self.received_at})
        return head.encode() + b"\n" + self.body

    @classmethod
    def decode(cls, data: bytes) -> Delivery:
        head, _, body = data.partition(b"\n")
        meta = json.loads(head)
        return cls(event=str(meta["event"]), delivery_id=str(meta["delivery"]), body=body,
                   hook_id=str(meta.get("hook_id", "")),
                   received_at=float(meta.get("received_at", 0.0)))


def check(headers: Mapping[str, str], body: bytes, secret: str) -> Delivery | Refusal:
    """Signature first (401), then the headers and the JSON body (400)."""
    signature = headers.get("x-hub-signature-256", "")
    if not signature.startswith("sha256="):
        return Refusal(401, "missing X-Hub-Signature-256 (sha1 signatures are not accepted)")
    if not verify(secret, body, signature):
        return Refusal(401, "X-Hub-Signature-256 does not match the body")
    event = headers.get("x-github-event", "")
    delivery_id = headers.get("x-github-delivery", "")
    if not event:
        return Refusal(400, "missing X-GitHub-Event header")
    if not delivery_id:
        return Refusal(400, "missing X-GitHub-Delivery header")
    if not _EVENT.match(event):
        return Refusal(400, "X-GitHub-Event is not an event name")
    if not _DELIVERY.match(delivery_id):
        return Refusal(400, "X-GitHub-Delivery is not a delivery id")
    if (why := _not_an_object(body)) is not None:
        return Refusal(400, why)
    return Delivery(event, delivery_id, body, headers.get("x-github-hook-id", ""), time.time())


def _not_an_object(body: bytes) -> str | None:
    """Why the body is not a JSON object, or None when it looks like one.

    A signed body comes from GitHub (or whoever holds the secret), so the ack path only
    checks its shape (`{...}`) instead of parsing 6 KB or more of JSON on every delivery
    (the parse was the largest cost left there); the dispatcher parses it and drops,
    logs and counts anything that is not an object. Refusals still say which it is.
    """
    stripped = body.strip()
    if stripped[:1] == b"{" and stripped[-1:] == b"}":
        return None
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return "body is not JSON"
    return "body is not a JSON object"
