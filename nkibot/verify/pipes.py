"""Bounded I/O with a child: feed stdin, read stdout/stderr incrementally, keep a capped
head and tail of each, and stop at a deadline.

A child that prints hundreds of MiB costs the parent at most `head + tail` bytes per
stream; what was dropped in between is counted and marked in the kept text.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class Capped:
    """The first `head` bytes and the last `tail` bytes of a stream, and how many were cut."""

    head: int
    tail: int
    _first: bytearray = field(default_factory=bytearray)
    _last: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, data: bytes) -> None:
        room = self.head - len(self._first)
        if room > 0:
            self._first += data[:room]
            data = data[room:]
        if not data:
            return
        self._last += data
        excess = len(self._last) - self.tail
        if excess > 0:
            del self._last[:excess]
            self.dropped += excess

    def value(self) -> bytes:
        if not self.dropped:
            return bytes(self._first + self._last)
        mark = f"\n[... {self.dropped} bytes dropped by the sandbox ...]\n".encode()
        return bytes(self._first) + mark + bytes(self._last)


def capped_file(fd: int, head: int, tail: int) -> bytes:
    """What a `Capped(head, tail)` fed a whole file would keep: its first `head` and
    last `tail` bytes (read with pread, nothing in between), marked as there."""
    size = os.fstat(fd).st_size
    kept = Capped(head, tail)
    kept.add(os.pread(fd, min(size, head), 0))
    start = max(head, size - tail)
    if start < size:
        kept.add(os.pread(fd, size - start, start))
    kept.dropped += max(0, start - head)
    return kept.value()


def pump(proc: subprocess.Popen[bytes], stdin: bytes, out: Capped, err: Capped,
         deadline: float) -> bool:
    """Feed and drain `proc` until both outputs close or `deadline`; True on time-out."""
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    for fd in sinks:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin)
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    try:
        while sinks:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            for key, _ in sel.select(timeout=min(left, 1.0)):
                fd = int(key.fd)
                if fd in sinks:
                    data = _read(fd)
                    if data:
                        sinks[fd].add(data)
                    elif data is not None:
                        sel.unregister(fd)
                        del sinks[fd]
                else:
                    pending = _write(proc, sel, pending)
        return False
    finally:
        sel.close()
        if not proc.stdin.closed:
            proc.stdin.close()


def _read(fd: int) -> bytes | None:
    """Bytes read, b"" at end of stream, None when there was nothing after all."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _write(proc: subprocess.Popen[bytes], sel: selectors.BaseSelector,
           pending: memoryview) -> memoryview:
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    try:
        sent = os.write(fd, pending[:CHUNK])
    except BlockingIOError:
        return pending
    except OSError:  # the child closed its stdin: it reads no more
        sent = len(pending)
    pending = pending[sent:]
    if not pending:
        sel.unregister(fd)
        proc.stdin.close()
    return pending
