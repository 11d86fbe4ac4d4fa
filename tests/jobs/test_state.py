"""The job state store: records, lookups, cancellation and status."""

from __future__ import annotations

from pathlib import Path

from nkibot.jobs.model import Job, Trigger
from nkibot.jobs.state import JobStateStore, SqliteJobStateStore


def make_job(job_id: str, target: str = "a.py::A", issue: int = 1, generation: int = 0) -> Job:
    trigger = Trigger(kind="comment", delivery_id="d", sender="alice", issue_number=issue)
    return Job(id=job_id, repo="acme/models", installation_id=7, target=target, sha="a" * 40,
               trigger=trigger, generation=generation)


class TestSqliteJobStateStore:
    def test_is_a_store(self, tmp_path: Path) -> None:
        """SqliteJobStateStore satisfies the JobStateStore protocol."""
        assert isinstance(SqliteJobStateStore(tmp_path / "s.db"), JobStateStore)

    def test_record_get_and_find(self, tmp_path: Path) -> None:
        """Recorded jobs come back whole, filtered by target and issue."""
        store = SqliteJobStateStore(tmp_path / "s.db")
        store.record(make_job("j1", "a.py::A", 1))
        store.record(make_job("j2", "b.py::B", 1))
        store.record(make_job("j3", "a.py::A", 2))
        assert store.get("j2") == make_job("j2", "b.py::B", 1)
        assert store.get("nope") is None
        assert {j.id for j in store.find("acme/models", issue_number=1)} == {"j1", "j2"}
        assert {j.id for j in store.find("acme/models", target="a.py::A")} == {"j1", "j3"}
        assert store.find("other/repo") == []

    def test_cancel_and_status(self, tmp_path: Path) -> None:
        """Cancellation sticks and is visible from another handle on the same file."""
        store = SqliteJobStateStore(tmp_path / "s.db")
        store.record(make_job("j1"))
        assert store.status("j1") == "queued"
        assert store.mark_cancelled("j1") is True
        assert store.mark_cancelled("missing") is False
        other = SqliteJobStateStore(tmp_path / "s.db")
        assert other.is_cancelled("j1") and not other.is_cancelled("missing")
        other.set_status("j1", "running")
        assert store.status("j1") == "running"

    def test_record_is_idempotent(self, tmp_path: Path) -> None:
        """Recording the same id twice keeps one row and the newest job (e.g. its check run id)."""
        store = SqliteJobStateStore(tmp_path / "s.db")
        store.record(make_job("j1"))
        store.record(make_job("j1").model_copy(update={"check_run_id": 9}))
        assert len(store.find("acme/models")) == 1
        assert store.get("j1") is not None and store.get("j1").check_run_id == 9  # type: ignore[union-attr]
