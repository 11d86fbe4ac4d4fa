"""What `/readyz` answers and what `nkibot serve` says at start-up.

Ready means a delivery stored now can be dispatched: the inbox answers and, where the
dispatcher runs in this process, GitHub is reachable and accepts the App's credentials.
`/healthz` stays liveness only. Dead letters never make the service unready (they are
history), but their count and newest causes are in the details, for whoever is paged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from nkibot.bot.delivery import STORED_EVENTS
from nkibot.config.settings import Settings
from nkibot.github.reach import AppReach, missing_credentials, reach_app
from nkibot.jobs.queue import DeadLetterReport, Queue

#: A good answer is trusted this long; a bad one is re-asked sooner.
TTL_OK_S = 30.0
TTL_FAIL_S = 5.0
Reach = Callable[[Settings], Awaitable[AppReach]]


class GitHubCheck:
    """`reach_app`, cached, and asked once however many probes arrive together."""

    def __init__(self, settings: Settings, reach: Reach = reach_app) -> None:
        self.settings, self.reach = settings, reach
        self._last: tuple[float, AppReach] | None = None
        self._lock = asyncio.Lock()

    async def state(self) -> AppReach:
        async with self._lock:
            now = time.monotonic()
            if self._last is not None:
                at, found = self._last
                if now - at < (TTL_OK_S if found.ok else TTL_FAIL_S):
                    return found
            found = await self.reach(self.settings)
            self._last = (time.monotonic(), found)
            return found


def dead_letters(queue: Queue) -> dict[str, Any] | None:
    """The inbox's dead letters: a count and the newest causes (None: not kept here)."""
    if not isinstance(queue, DeadLetterReport):
        return None
    count, newest = queue.dead_report()
    return {"count": count, "newest": [{"delivery": d.item_id, "attempts": d.attempts,
                                        "reason": d.reason} for d in newest]}


async def readiness(settings: Settings, queue: Queue,
                    github: GitHubCheck) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of `/readyz`; raises when the inbox cannot be read."""
    depth = await run_in_threadpool(queue.depth)
    body: dict[str, Any] = {"status": "ready", "inbox_depth": depth}
    if settings.dispatcher_enabled:
        found = await github.state()
        body["github"] = {"ok": found.ok, "detail": found.detail}
        unsubscribed = sorted(STORED_EVENTS - set(found.events)) if found.events else []
        if unsubscribed:
            body["github"]["not_subscribed"] = unsubscribed
        if not found.ok:
            body["status"] = "not ready"
    else:
        body["github"] = {"ok": None, "detail": "not used here: the dispatcher runs apart "
                                                "(nkibot dispatch)"}
    dead = await run_in_threadpool(dead_letters, queue)
    if dead is not None:
        body["dead_letters"] = dead
    return (200 if body["status"] == "ready" else 503), body


def startup_fields(settings: Settings, host: str, port: int) -> dict[str, Any]:
    """The one start-up line's fields: what this service is and what it will do."""
    return {
        "address": f"http://{host}:{port}",
        "queue": settings.queue_url,
        "dispatcher": "in-process" if settings.dispatcher_enabled else "apart (nkibot dispatch)",
        "app_id": settings.app_id if settings.app_id is not None else "absent",
        "app_credentials": missing_credentials(settings) or "present",
        "events": sorted(STORED_EVENTS),
        "github_url": settings.github_url,
    }
