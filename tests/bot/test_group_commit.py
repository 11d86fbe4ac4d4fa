"""Group commit: concurrent deliveries share transactions, and each answer follows its commit."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from nkibot.bot.group_commit import GroupCommit
from nkibot.jobs.sqlite import SqliteQueue


class CountingQueue(SqliteQueue):
    """The real SQLite queue, counting its transactions."""

    batches: list[int]

    def put_many(self, items: list[tuple[bytes, str]]) -> list[bool]:
        self.batches = [*getattr(self, "batches", []), len(items)]
        return super().put_many(items)


class TestGroupCommit:
    async def test_concurrent_puts_share_transactions(self, tmp_path: Path) -> None:
        """300 concurrent puts (one in ten a repeat) land in far fewer commits, each once."""
        queue = CountingQueue(tmp_path / "q.db", "inbox")
        group = GroupCommit(queue)
        keys = [f"d{i}" if i % 10 else f"d{i - 5}" for i in range(1, 301)]
        answers = await asyncio.gather(*(group.put(k.encode(), k) for k in keys))
        await group.close()
        unique = len(set(keys))
        assert queue.count() == unique
        assert sum(answers) == unique  # a repeat answers False, exactly once per key
        assert sum(queue.batches) == 300 and len(queue.batches) < 30

    async def test_answer_waits_for_the_commit(self, tmp_path: Path) -> None:
        """When put returns, another connection already reads the item (it is durable)."""
        queue = SqliteQueue(tmp_path / "q.db", "inbox")
        group = GroupCommit(queue, linger_s=0.01)
        assert await group.put(b"body", "k1") is True
        other = SqliteQueue(tmp_path / "q.db", "inbox")
        lease = other.lease(30)
        assert lease is not None and lease.body == b"body"
        await group.close()

    async def test_a_failed_transaction_fails_every_waiting_request(self, tmp_path: Path) -> None:
        """If the batch cannot commit, each request in it gets the error (the route answers 503)."""
        queue = SqliteQueue(tmp_path / "q.db", "inbox")
        queue.close()
        group = GroupCommit(queue)
        results = await asyncio.gather(*(group.put(b"x", f"k{i}") for i in range(5)),
                                       return_exceptions=True)
        assert all(isinstance(r, sqlite3.ProgrammingError) for r in results)
        with pytest.raises(sqlite3.ProgrammingError):
            await group.put(b"x", "later")  # the writer survives a failed batch
        await group.close()


class TestPutMany:
    def test_repeats_inside_one_batch_are_stored_once(self, tmp_path: Path) -> None:
        """A key twice in one transaction is stored once; the second copy answers False."""
        queue = SqliteQueue(tmp_path / "q.db", "inbox")
        assert queue.put_many([(b"a", "k"), (b"b", "k"), (b"c", "j")]) == [True, False, True]
        lease = queue.lease(30)
        assert lease is not None and (lease.item_id, lease.body) == ("k", b"a")
