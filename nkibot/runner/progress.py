"""Throttled in-progress check-run updates: one per turn at most every N seconds.

GitHub's secondary rate limits punish bursts of writes, so per-turn updates are
coalesced: a turn that arrives inside the interval is remembered, and the latest one
is sent once the interval has passed (or when the job ends, by the final update).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from nkibot.github.render import CheckRunOutput, progress_output
from nkibot.results import TurnRecord

log = structlog.get_logger("nkibot.runner.progress")
Send = Callable[[CheckRunOutput], Awaitable[None]]


def due(now: float, last_sent: float | None, interval_s: float) -> bool:
    """Whether an update may go out now (pure)."""
    return last_sent is None or now - last_sent >= interval_s


class ProgressReporter:
    """Collects turns from the pipeline's `on_turn` and sends throttled updates."""

    def __init__(self, send: Send, target: str, *, interval_s: float,
                 max_turns: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.send, self.target, self.interval_s = send, target, interval_s
        self.max_turns, self.clock = max_turns, clock
        self.started = clock()
        self.last: TurnRecord | None = None
        self.last_sent: float | None = None
        self.sent = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._delayed: asyncio.Task[None] | None = None

    def on_turn(self, record: TurnRecord) -> None:
        """Called by the pipeline (on the event loop) after every turn."""
        self.last = record
        if due(self.clock(), self.last_sent, self.interval_s):
            self._schedule()
        elif self._delayed is None:
            wait = self.interval_s - (self.clock() - (self.last_sent or 0.0))
            self._delayed = asyncio.ensure_future(self._later(max(0.0, wait)))

    def _schedule(self) -> None:
        self.last_sent = self.clock()
        output = progress_output(self.target, self.last, elapsed_s=self.last_sent - self.started,
                                 max_turns=self.max_turns)
        self._spawn(self._safe_send(output))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._delayed = None
        self._schedule()

    async def _safe_send(self, output: CheckRunOutput) -> None:
        try:
            await self.send(output)
            self.sent += 1
        except Exception as exc:  # progress is best effort; the final update matters
            log.warning("progress update failed", error=str(exc))

    async def close(self) -> None:
        """Drop a pending delayed update and wait for the ones in flight."""
        if self._delayed is not None:
            self._delayed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._delayed
            self._delayed = None
        for task in list(self._tasks):
            await task
