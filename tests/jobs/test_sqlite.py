"""The SQLite queue: dedupe, leases with visibility timeouts, attempts and dead letters."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nkibot.jobs.queue import DeadLetterSource, Queue
from nkibot.jobs.sqlite import SqliteQueue


@pytest.fixture
def queue(tmp_path: Path) -> SqliteQueue:
    return SqliteQueue(tmp_path / "q.db", "jobs", max_attempts=2)


class TestSqliteQueue:
    def test_is_a_queue(self, queue: SqliteQueue) -> None:
        """SqliteQueue satisfies the Queue and DeadLetterSource protocols."""
        assert isinstance(queue, Queue) and isinstance(queue, DeadLetterSource)

    def test_put_dedupes_by_key(self, queue: SqliteQueue) -> None:
        """The same dedupe key is stored once, even after the first copy was acked."""
        assert queue.put(b"a", "k1") is True
        assert queue.put(b"b", "k1") is False
        lease = queue.lease(10)
        assert lease is not None and lease.body == b"a"
        queue.ack(lease)
        assert queue.put(b"c", "k1") is False
        assert queue.lease(10) is None
        assert queue.count() == 1

    def test_lease_hides_item_until_timeout(self, queue: SqliteQueue) -> None:
        """A leased item is invisible, then returns with attempt 2 after its timeout."""
        queue.put(b"x", "k")
        first = queue.lease(0.2)
        assert first is not None and first.attempt == 1
        assert queue.lease(0.2) is None
        time.sleep(0.25)
        second = queue.lease(10)
        assert second is not None and second.attempt == 2 and second.token != first.token

    def test_stale_ack_does_not_remove_a_new_lease(self, queue: SqliteQueue) -> None:
        """Acking with an expired lease's token leaves the current holder's lease alone."""
        queue.put(b"x", "k")
        old = queue.lease(0.05)
        time.sleep(0.1)
        current = queue.lease(10)
        assert old is not None and current is not None
        queue.ack(old)
        assert queue.depth() == 1
        queue.ack(current)
        assert queue.depth() == 0

    def test_dead_letter_after_max_attempts(self, queue: SqliteQueue) -> None:
        """An item whose leases keep expiring moves to dead letters after max_attempts."""
        queue.put(b"poison", "p")
        for _ in range(2):
            assert queue.lease(0.01) is not None
            time.sleep(0.02)
        assert queue.lease(10) is None
        dead = queue.dead_letters()
        assert [(d.item_id, d.body, d.attempts) for d in dead] == [("p", b"poison", 2)]

    def test_nack_delays_and_buries_on_last_attempt(self, queue: SqliteQueue) -> None:
        """nack returns the item after its delay; the last allowed attempt goes to dead letters."""
        queue.put(b"x", "k")
        lease = queue.lease(10)
        assert lease is not None
        queue.nack(lease, delay=0.2)
        assert queue.lease(10) is None
        time.sleep(0.25)
        again = queue.lease(10)
        assert again is not None and again.attempt == 2
        queue.nack(again)
        assert queue.lease(10) is None and len(queue.dead_letters()) == 1

    def test_release_does_not_use_an_attempt(self, queue: SqliteQueue) -> None:
        """release gives an unworked item back after its delay without counting an attempt."""
        queue.put(b"x", "k")
        for _ in range(3):  # more than max_attempts=2
            lease = queue.lease(30)
            assert lease is not None and lease.attempt == 1
            queue.release(lease)
        lease = queue.lease(30)
        assert lease is not None
        queue.release(lease, delay=60)
        assert queue.lease(30) is None  # hidden for the delay
        assert queue.dead_letters() == []

    def test_extend_keeps_the_lease(self, queue: SqliteQueue) -> None:
        """extend pushes the visibility timeout out so nobody else gets the item."""
        queue.put(b"x", "k")
        lease = queue.lease(0.1)
        assert lease is not None
        queue.extend(lease, 10)
        time.sleep(0.15)
        assert queue.lease(10) is None

    def test_fifo_and_shared_file(self, tmp_path: Path) -> None:
        """Two handles on one file (two processes in production) see one FIFO queue per name."""
        a = SqliteQueue(tmp_path / "q.db", "inbox")
        b = SqliteQueue(tmp_path / "q.db", "inbox")
        jobs = SqliteQueue(tmp_path / "q.db", "jobs")
        for i in range(3):
            a.put(f"{i}".encode(), f"k{i}")
        got = [b.lease(10) for _ in range(3)]
        assert [g.body for g in got if g] == [b"0", b"1", b"2"]
        assert jobs.depth() == 0 and a.depth() == 3

    def test_purge_forgets_old_done_items(self, queue: SqliteQueue) -> None:
        """purge_done drops acked rows past the age limit and keeps pending ones."""
        queue.put(b"a", "done")
        queue.put(b"b", "pending")
        lease = queue.lease(10)
        assert lease is not None and lease.item_id == "done"
        queue.ack(lease)
        assert queue.purge_done(3600) == 0
        time.sleep(0.05)
        assert queue.purge_done(0.01) == 1
        assert queue.count() == 1 and queue.put(b"a", "done") is True

    def test_rejects_bad_names(self, tmp_path: Path) -> None:
        """Queue names become table names, so only [a-z0-9_] is accepted."""
        with pytest.raises(ValueError, match="queue name"):
            SqliteQueue(tmp_path / "q.db", "x; DROP TABLE")
