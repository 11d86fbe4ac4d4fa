"""The Queue protocol and the optional capabilities some backends add (small protocols).

At-least-once delivery with leases: an item leased and not acked before its
visibility timeout returns to the queue; after `max_attempts` leases it moves to
the dead-letter store instead. The backends are `sqlite.SqliteQueue` and `sqs.SqsQueue`;
`factory.open_queue` picks one by URL. Callers test for a capability with
`isinstance(queue, BatchPut)` and the like, never by probing attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Lease:
    item_id: str
    body: bytes
    attempt: int
    #: Backend-specific handle (SQLite lease token, SQS receipt handle).
    token: str


@runtime_checkable
class Queue(Protocol):
    def put(self, body: bytes, dedupe_key: str) -> bool:
        """Store `body` once per `dedupe_key`; False when it was already there."""
        ...

    def lease(self, timeout: float) -> Lease | None:
        """Take the next visible item for `timeout` seconds, or None if empty."""
        ...

    def ack(self, lease: Lease) -> None: ...

    def nack(self, lease: Lease, delay: float = 0.0, reason: str = "") -> None:
        """The attempt failed: retry after `delay`; counts toward the dead-letter limit.

        `reason`: why it failed, kept with the item if this attempt was its last (SQLite's
        dead row; SQS's dead-letter queue keeps no reason, the dead-letter log line does).
        """
        ...

    def release(self, lease: Lease, delay: float = 0.0) -> None:
        """Give the item back unworked (fairness deferral, shutdown): no attempt is used."""
        ...

    def extend(self, lease: Lease, timeout: float) -> None: ...

    def depth(self) -> int:
        """Visible plus leased items (for metrics and readiness)."""
        ...


@runtime_checkable
class BatchPut(Protocol):
    def put_many(self, items: list[tuple[bytes, str]]) -> list[bool]:
        """`put` for each (body, dedupe_key) in one durable write; a bool for each, in order."""
        ...


@runtime_checkable
class Purgeable(Protocol):
    def purge_done(self, older_than_s: float) -> int:
        """Forget finished items older than `older_than_s`; how many were forgotten."""
        ...


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None:
        """Release the connection and any thread the queue started."""
        ...


@dataclass(frozen=True)
class DeadLetter:
    """An item that used up its attempts (SQLite: marked dead; SQS: moved to the DLQ)."""

    item_id: str
    body: bytes
    attempts: int
    reason: str


@runtime_checkable
class DeadLetterSource(Protocol):
    def dead_letters(self) -> list[DeadLetter]:
        """Items that will not be delivered again, oldest first (SQS: a peek of up to 10)."""
        ...


@runtime_checkable
class DeadLetterReport(Protocol):
    def dead_report(self, newest: int = 3) -> tuple[int, list[DeadLetter]]:
        """How many items are dead, and the newest `newest` of them without their bodies:
        cheap enough for a readiness probe and `nkibot doctor`."""
        ...
