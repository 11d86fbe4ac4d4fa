"""Job state beside the queue: what was enqueued, and which jobs were cancelled.

The dispatcher records every job it enqueues (so `/nki cancel`, `/nki retry` and
the check run's Retry action can find them); the runner asks `is_cancelled`
between turns and records progress with `set_status`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from nkibot.jobs.model import Job
from nkibot.jobs.sqlite import connect


@runtime_checkable
class JobStateStore(Protocol):
    def record(self, job: Job) -> None:
        """Remember `job` (idempotent: the same id overwrites its own record)."""
        ...

    def get(self, job_id: str) -> Job | None: ...

    def mark_cancelled(self, job_id: str) -> bool:
        """True when the job exists (it is then cancelled, whatever its status)."""
        ...

    def is_cancelled(self, job_id: str) -> bool: ...

    def set_status(self, job_id: str, status: str) -> None:
        """Free-form progress (`queued`, `running`, `done`, `failed`) for humans and retry."""
        ...

    def status(self, job_id: str) -> str | None: ...

    def find(
        self, repo: str, target: str | None = None, issue_number: int | None = None
    ) -> list[Job]:
        """Jobs of `repo`, optionally for one target and/or one issue or PR, newest first."""
        ...


class SqliteJobStateStore:
    """`JobStateStore` in a SQLite file (the queue's own file by default)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = connect(path)
        with self._lock:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS job_state ("
                " id TEXT PRIMARY KEY, repo TEXT NOT NULL, target TEXT NOT NULL,"
                " issue_number INTEGER, job TEXT NOT NULL, status TEXT NOT NULL,"
                " cancelled INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL)"
            )
            self._conn.execute(
                "CREATE INDEX IF NOT EXISTS job_state_repo ON job_state(repo, target)"
            )

    def record(self, job: Job) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO job_state (id, repo, target, issue_number, job, status, updated)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?)"
                " ON CONFLICT(id) DO UPDATE SET job=excluded.job, updated=excluded.updated",
                (job.id, job.repo, job.target, job.trigger.issue_number,
                 job.model_dump_json(), time.time()),
            )

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._conn.execute("SELECT job FROM job_state WHERE id=?", (job_id,)).fetchone()
        return None if row is None else Job.model_validate_json(row[0])

    def mark_cancelled(self, job_id: str) -> bool:
        with self._lock:
            cur = self._conn.execute(
                "UPDATE job_state SET cancelled=1, updated=? WHERE id=?", (time.time(), job_id)
            )
            return cur.rowcount == 1

    def is_cancelled(self, job_id: str) -> bool:
        with self._lock:
            row = self._conn.execute(
                "SELECT cancelled FROM job_state WHERE id=?", (job_id,)
            ).fetchone()
        return bool(row and row[0])

    def set_status(self, job_id: str, status: str) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE job_state SET status=?, updated=? WHERE id=?",
                (status, time.time(), job_id),
            )

    def status(self, job_id: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT status FROM job_state WHERE id=?", (job_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def find(
        self, repo: str, target: str | None = None, issue_number: int | None = None
    ) -> list[Job]:
        query = "SELECT job FROM job_state WHERE repo=?"
        args: list[object] = [repo]
        if target is not None:
            query += " AND target=?"
            args.append(target)
        if issue_number is not None:
            query += " AND issue_number=?"
            args.append(issue_number)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY updated DESC, id", args).fetchall()
        return [Job.model_validate_json(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
