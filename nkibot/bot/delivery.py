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
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return Refusal(400, "body is not JSON")
    if not isinstance(payload, dict):
        return Refusal(400, "body is not a JSON object")
    return Delivery(event, delivery_id, body, headers.get("x-github-hook-id", ""), time.time())
