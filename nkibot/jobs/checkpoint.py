"""WAL checkpoints on a thread of their own, so no commit on the ack path waits on one.

SQLite's automatic checkpoint runs inside the commit that crosses the WAL threshold
(1000 pages): that commit copies the WAL into the database and fsyncs both, which took
18-48 ms on this host with 6 KB webhook bodies, while an ordinary group commit takes
0.3 ms. On the webhook service that commit runs on the event loop, so every request in
flight waited for it; it was the whole p99 of `bench/webhook_load.py`.

The writer turns the automatic checkpoint off (`wal_autocheckpoint=0`) and this thread
runs a PASSIVE checkpoint on its own connection every `interval_s`. PASSIVE never takes
the write lock, so commits go on while frames are copied, and the sqlite3 module releases
the GIL while it works. Durability is unchanged: a committed transaction is in the WAL,
and a later reader or a restart replays it whether or not it was checkpointed yet.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

#: A reset WAL is cut back to this size, so one burst does not keep a large file forever.
WAL_SIZE_LIMIT = 64 * 1024 * 1024


class WalCheckpointer:
    """Checkpoints one database file every `interval_s` until `stop`."""

    def __init__(self, path: Path, interval_s: float = 0.25) -> None:
        self.path = path
        self.interval_s = interval_s
        self.checkpoints = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"wal-checkpoint:{path.name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        try:
            conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            while not self._stop.wait(self.interval_s):
                self.checkpoint_once(conn)
            self.checkpoint_once(conn)  # what the last commits left, before the file closes
        finally:
            conn.close()

    def checkpoint_once(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:  # busy or locked: frames stay in the WAL for the next try
            self.last_error = str(exc)
        else:
            self.checkpoints += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)
