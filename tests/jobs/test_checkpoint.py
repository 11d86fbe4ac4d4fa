"""The inbox's WAL checkpoints run on their own thread, never inside an ack-path commit."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_queue
from nkibot.jobs.sqlite import SqliteQueue

BODY = b"x" * 6144


def _autocheckpoint(queue: SqliteQueue) -> int:
    return int(queue._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


def _wait_for(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


def test_the_inbox_checkpoints_in_the_background_and_jobs_do_not(tmp_path: Path) -> None:
    """open_queue gives the inbox a checkpoint thread; the jobs queue keeps SQLite's default."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    inbox, jobs = open_queue(url, "inbox", Settings()), open_queue(url, "jobs", Settings())
    assert isinstance(inbox, SqliteQueue) and isinstance(jobs, SqliteQueue)
    try:
        assert _autocheckpoint(inbox) == 0
        assert _autocheckpoint(jobs) == 1000
    finally:
        inbox.close()
        jobs.close()


def test_commits_leave_the_copy_to_the_thread(tmp_path: Path) -> None:
    """Frames reach the database file while the writer only commits, then close stops it."""
    db = tmp_path / "q.db"
    queue = SqliteQueue(db, "inbox", background_checkpoint=True)
    empty = db.stat().st_size
    assert queue.put_many([(BODY, f"k{i}") for i in range(200)]) == [True] * 200
    checkpointer = queue._checkpointer
    assert checkpointer is not None
    assert _wait_for(lambda: checkpointer.checkpoints > 0
                     and db.stat().st_size > empty + 200 * len(BODY)), (
        "the checkpoint thread never copied the WAL into the database"
    )
    assert checkpointer.last_error == ""
    queue.close()
    assert not checkpointer._thread.is_alive()


def test_nothing_is_lost_when_the_process_never_checkpoints(tmp_path: Path) -> None:
    """A commit is durable in the WAL: a reader sees it though no checkpoint ran yet."""
    db = tmp_path / "q.db"
    queue = SqliteQueue(db, "inbox", background_checkpoint=True)
    assert queue._checkpointer is not None
    queue._checkpointer.stop()
    queue.put_many([(BODY, f"k{i}") for i in range(50)])
    with sqlite3.connect(db) as reader:
        assert reader.execute("SELECT COUNT(*) FROM q_inbox").fetchone()[0] == 50
    queue.close()
