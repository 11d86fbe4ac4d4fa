"""Group commit for the ack path: one writer, one transaction per batch, every 202 durable.

Each webhook request hands its delivery to the writer task and awaits its batch. The writer
takes everything that arrived since its last write, writes it in one transaction
(`BatchPut.put_many`), and answers each request; a delivery is answered only after its
own commit. The batch size follows the load with no timer on the quiet path; `linger_s`
lets more requests join before a write.

By default the write runs on the event loop itself: a SQLite WAL commit of a batch takes
about 25 us of CPU per 6 KB delivery, while handing each batch to a worker thread cost
60-100 us per delivery in thread wake-ups on a busy 2-core host (bench/webhook_load.py).
`in_thread=True` moves it off the loop for storage that may stall (network disks).
"""

from __future__ import annotations

import asyncio
import contextlib

import anyio

from nkibot.jobs.queue import BatchPut

Pending = tuple[bytes, str, "asyncio.Future[bool]"]


class GroupCommit:
    """Batches `put` calls on one event loop into `put_many` transactions."""

    def __init__(self, queue: BatchPut, *, max_batch: int = 512, linger_s: float = 0.0,
                 in_thread: bool = False) -> None:
        self.queue = queue
        self.in_thread = in_thread
        self.max_batch = max_batch
        self.linger_s = linger_s
        self._pending: list[Pending] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def put(self, body: bytes, dedupe_key: str) -> bool:
        """Stored (True) or already there (False), once the batch holding it has committed."""
        loop = asyncio.get_running_loop()
        # A new loop (a test client runs each request on its own) gets its own writer.
        if self._writer is None or self._writer.done() or self._loop is not loop:
            self._loop, self._wake = loop, asyncio.Event()
            self._writer = loop.create_task(self._run())
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((body, dedupe_key, future))
        assert self._wake is not None
        self._wake.set()
        return await future

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Yield once even without lingering: every request parsed in this loop turn joins.
            await asyncio.sleep(self.linger_s)
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                await self._write(batch)

    async def _write(self, batch: list[Pending]) -> None:
        try:
            items = [(body, key) for body, key, _ in batch]
            stored = (await anyio.to_thread.run_sync(self.queue.put_many, items)
                      if self.in_thread else self.queue.put_many(items))
        except Exception as exc:  # the whole transaction rolled back: every request fails
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), ok in zip(batch, stored, strict=True):
            if not future.done():
                future.set_result(ok)

    async def close(self) -> None:
        """Finish what is waiting, then stop the writer (service shutdown)."""
        if self._writer is None or self._loop is not asyncio.get_running_loop():
            return
        while self._pending:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            await self._write(batch)
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        self._writer = None
