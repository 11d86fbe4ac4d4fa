"""Build a signed webhook request from a saved fixture (`payload.json` + `headers.json`)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from githubkit.webhooks import sign


def signed_request(payload_file: Path, secret: str, event: str | None = None,
                   delivery: str | None = None) -> tuple[dict[str, str], bytes]:
    """Headers and body for POST /webhook; event and delivery come from headers.json if unset."""
    body = payload_file.read_bytes()
    saved: dict[str, str] = {}
    headers_file = payload_file.with_name("headers.json")
    if headers_file.is_file():
        saved = {k.lower(): str(v) for k, v in json.loads(headers_file.read_text()).items()}
    event = event or saved.get("x-github-event")
    if not event:
        raise ValueError(f"no event name: pass one or put headers.json beside {payload_file}")
    headers = {
        "content-type": "application/json",
        "user-agent": "GitHub-Hookshot/nkibot-replay",
        "x-github-event": event,
        "x-github-delivery": delivery or saved.get("x-github-delivery") or str(uuid.uuid4()),
        "x-hub-signature-256": sign(secret, body, "sha256"),
    }
    return headers, body
