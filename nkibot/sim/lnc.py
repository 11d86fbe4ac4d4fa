"""The logical NeuronCores of an LNC=2 launch: one thread each, one running at a time.

As the official simulator (nki/guides/nki_simulator.rst:207-210: "the simulator spawns two
Python threads that execute the kernel concurrently, each with its own program_id ...
sendrecv and core_barrier use thread-safe synchronization primitives"), `kernel[2]` runs
each logical core on a thread of its own. Ours passes a baton so that a launch is
deterministic: exactly one core runs at a time, and the running core hands over only when
it blocks (in `core_barrier` or `sendrecv`) or finishes; the next core in rank order that
can run goes next. Between two synchronisation points a core's instructions are never
interleaved with another core's, so results never depend on thread timing.

Because the scheduler knows what every core waits for, a deadlock is found exactly: the
running core blocks (or finishes) while no other core can run. That raises `lnc-sync`
naming each core's wait and kernel line, and every other core is woken and ended; no
wait can hang (waits also poll every `POLL_S` seconds for an error on another core).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkibot.sim.errors import ConstraintError, SimError, user_site
from nkibot.sim.races import Races

#: Seconds between a waiting core's checks for an error raised on another core.
POLL_S = 0.5


class _Ended(BaseException):
    """Raised in a waiting core when another core failed: that core's error is the one.
    (A BaseException, so a kernel's own `except Exception` cannot keep the core going.)"""


@dataclass
class Wait:
    """What a blocked core waits for, and where (kernel file:line), for error messages."""

    what: str
    where: str
    ready: Callable[[], bool]


@dataclass
class Message:
    """One sendrecv payload in flight: the values `src` held when it was sent."""

    values: np.ndarray[Any, Any]
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    where: str


@dataclass
class _Barrier:
    arrived: dict[int, Any] = field(default_factory=dict)  # core -> allocation of `data`


def sync_error(detail: str, where: str) -> ConstraintError:
    """An `lnc-sync` error located at `where` (file:line of the core that waits)."""
    err = ConstraintError("lnc-sync", detail)
    name, _, line = where.rpartition(":")
    if name and line.isdigit():
        err.file, err.line = name, int(line)
    return err


class Cores:
    """The scheduler of one LNC launch: turn, waits, barriers and sendrecv mailboxes."""

    def __init__(self, n: int, on_switch: Callable[[int], None] | None = None) -> None:
        self.n = n
        self.cond = threading.Condition()
        self.turn = 0
        self.done = [False] * n
        self.waits: list[Wait | None] = [None] * n
        self.error: BaseException | None = None
        self.on_switch = on_switch
        #: barrier generation -> arrivals; each core's count of barriers reached.
        self.barriers: dict[int, _Barrier] = {}
        self.reached = [0] * n
        #: (sender, receiver, pipe_id) -> payloads in send order.
        self.mail: dict[tuple[int, int, Any], deque[Message]] = {}
        self.races = Races(n)

    def access(self, pid: int, h: Any, write: bool, what: str) -> Callable[[], None] | None:
        """Core `pid` reads or writes shared-HBM handle `h`: refuse an unordered access
        (for a write, maybe a check to run once the bytes are written)."""
        return self.races.access(pid, self.reached[pid], h, write, what, user_site())

    # ---- running the cores -------------------------------------------------------------
    def run(self, body: Callable[[int], Any]) -> list[Any]:
        """`body(pid)` on one thread per core; their results, or the first core's error."""
        results: list[Any] = [None] * self.n
        threads = [threading.Thread(target=self._core, args=(pid, body, results),
                                    name=f"nki-logical-core-{pid}", daemon=True)
                   for pid in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error
        self._check_drained()
        return results

    def _core(self, pid: int, body: Callable[[int], Any], results: list[Any]) -> None:
        try:
            with self.cond:
                self._await_turn(pid)
            results[pid] = body(pid)
            with self.cond:
                self.done[pid] = True
                self._hand_over(pid, None)
        except _Ended:
            pass
        except BaseException as exc:  # the launch's error: the main thread raises it
            with self.cond:
                if self.error is None:
                    self.error = exc
                self.cond.notify_all()

    def _await_turn(self, pid: int) -> None:
        while self.turn != pid:
            if self.error is not None:
                raise _Ended
            self.cond.wait(POLL_S)
        if self.error is not None:
            raise _Ended

    def _runnable(self, q: int) -> bool:
        w = self.waits[q]
        return not self.done[q] and (w is None or w.ready())

    def _hand_over(self, pid: int, wait: Wait | None) -> None:
        """Core `pid` blocks on `wait` (or has finished): give the turn to the next core."""
        for step in range(1, self.n + 1):
            q = (pid + step) % self.n
            if q != pid and self._runnable(q):
                self.turn = q
                if self.on_switch is not None:
                    self.on_switch(q)
                self.cond.notify_all()
                return
        blocked = [(q, w) for q, w in enumerate(self.waits) if w is not None and
                   not self.done[q] and q != pid]
        if wait is None and not blocked:
            return  # the last core finished
        raise self._deadlock(pid, wait, blocked)

    def _deadlock(self, pid: int, wait: Wait | None,
                  blocked: list[tuple[int, Wait]]) -> SimError:
        waits = sorted([*blocked, *([] if wait is None else [(pid, wait)])])
        parts = [f"core {q} waits in {w.what} (at {w.where})" for q, w in waits]
        finished = [str(q) for q in range(self.n) if self.done[q]]
        tail = f"; core {', '.join(finished)} finished without matching it" if finished else \
            "; no core can go on"
        return sync_error("deadlock between logical cores: " + ", ".join(parts) + tail,
                          waits[0][1].where)

    def block(self, pid: int, wait: Wait) -> None:
        """Core `pid` (the running one, holding `cond`) waits until `wait.ready()`."""
        if wait.ready():
            return
        self.waits[pid] = wait
        self._hand_over(pid, wait)
        while not (self.turn == pid and wait.ready()):
            if self.error is not None:
                raise _Ended
            self.cond.wait(POLL_S)
        self.waits[pid] = None

    # ---- core_barrier --------------------------------------------------------------------
    def barrier(self, pid: int, cores: tuple[int, ...], alloc: Any, desc: str,
                where: str) -> None:
        with self.cond:
            gen = self.reached[pid]
            self.reached[pid] += 1
            bar = self.barriers.setdefault(gen, _Barrier())
            for q, other in bar.arrived.items():
                if other[0] is not alloc:
                    raise sync_error(
                        f"core_barrier #{gen + 1}: core {pid} synchronises on {desc} but core "
                        f"{q} on {other[1]} (at {other[2]}); both cores must pass the same "
                        "shared_hbm tensor", where)
            bar.arrived[pid] = (alloc, desc, where)

            def ready() -> bool:
                return all(q in bar.arrived for q in cores)

            self.block(pid, Wait(f"core_barrier #{gen + 1}", where, ready))

    # ---- sendrecv ------------------------------------------------------------------------
    def exchange(self, pid: int, send_to: int, recv_from: int, pipe: Any,
                 payload: Message, where: str) -> Message:
        """Post `payload` to `send_to` on `pipe`, then wait for `recv_from`'s on `pipe`."""
        with self.cond:
            self.mail.setdefault((pid, send_to, pipe), deque()).append(payload)
            box = self.mail.setdefault((recv_from, pid, pipe), deque())
            self.block(pid, Wait(f"sendrecv (pipe_id={pipe!r}, receiving from core "
                                 f"{recv_from})", where, lambda: bool(box)))
            return box.popleft()

    def _check_drained(self) -> None:
        for (src, dst, pipe), box in self.mail.items():
            if box:
                raise sync_error(f"sendrecv: core {src} sent {len(box)} tile(s) to core {dst} "
                                 f"on pipe_id={pipe!r} that core {dst} never received",
                                 box[0].where)
