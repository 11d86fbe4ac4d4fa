"""A conversion's warm torch sandbox: one confined process imports torch once and forks a
fresh process for each torch child of the conversion (describe, lowering, reference).

Why: each of those children started a cold interpreter that imported torch (1.2 s here)
and, to trace on the meta device, torch._dynamo (1.4 s more): about 4 of the README
example's 7 s. Forked from a process that has imported them, a child starts in
milliseconds (`bench/time_to_verdict.py` has the figures).

What stays exactly as it was:
- The confinement. The server (`nkibot.verify.children.zygote`) starts as a cold child
  does (bubblewrap, the sandbox uid, every namespace, rlimits, seccomp stage 1), with
  fork allowed for it alone. It loads the no-exec filter before it imports anything and
  makes itself non-dumpable. Each forked run loads the no-fork, no-exec filter, its own
  rlimits, a fresh environment and an empty HOME before any untrusted code runs: the
  rules a cold child has.
- A fresh process per run: each run is a new fork of the state after the imports, so
  nothing one run does to its memory reaches the next.
- Nothing is shared between conversions: a warm sandbox belongs to one conversion
  (`session`), and its view (the conversion's work directory, the reference's folder)
  is fixed when it starts.
- The parent decides. The server's answers are sizes and bytes the parent checks
  against the caps; the deadline is the parent's; at the first thing out of place the
  parent kills the whole sandbox, and that run (unless it timed out) and every later one
  run cold, as before.
- Only torch children come here: kernels (torch-free children) always run cold, one
  fresh sandbox each, and so do children that need a view the warm sandbox lacks.

What the runs of one conversion share: the work directory, which holds their inputs and
outputs (all the user's own reference), and the server, which a run could stop (the next
one then runs cold).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from nkibot.verify import isolation, seccomp, view
from nkibot.verify.pipes import Capped
from nkibot.verify.sandbox import (
    BOOT,
    REFERENCE,
    STDERR_CAP,
    STDOUT_CAP,
    WATCH_S,
    Confinement,
    SandboxOutcome,
    Started,
    child_env,
    over_limit,
    python_module_argv,
    run_sandboxed,
    start_confined,
    write_limit,
)

SERVER = "nkibot.verify.children.zygote"
#: The torch children a warm sandbox runs (their module, run with no arguments).
MODULES = frozenset({"nkibot.verify.harness", "nkibot.lowering"})
#: How long the server may take to import torch (it never does on a sane host).
READY_S = 120.0
#: How long past a run's deadline the server has to answer before it is killed.
GRACE_S = 5.0
MEMORY_MB = 8192
CPU_S = 3600


class _Broken(Exception):
    """The server said something out of place, or nothing: it is killed."""


class Zygote:
    """One conversion's warm torch sandbox (see the module docstring). Runs one child at a
    time; a child asked for while one runs goes cold."""

    def __init__(self, root: Path, readable: Sequence[Path] = (),
                 memory_mb: int = MEMORY_MB) -> None:
        self.root = root
        self.readable = tuple(Path(p).resolve() for p in readable)
        self.memory_mb = memory_mb
        self.broken: str | None = None
        self.runs = 0
        self._started: Started | None = None
        self._ready = False
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._stderr = Capped(*STDERR_CAP)

    def start(self) -> None:
        """Start the server (it imports torch while the conversion goes on)."""
        confinement = Confinement(readable=self.readable, writable=(self.root,),
                                  processes=True)
        argv = python_module_argv(SERVER, seccomp.stage_two().hex(),
                                  seccomp.no_processes().hex())
        try:
            self._started = start_confined(argv, memory_mb=self.memory_mb, cpu_s=CPU_S,
                                           confinement=confinement)
        except OSError as exc:
            self.broken = f"the warm sandbox could not start: {exc}"
            return
        if self._started is None:
            self.broken = "no warm sandbox without full isolation"
            return
        stderr = self._started.proc.stderr
        assert stderr is not None
        threading.Thread(target=_drain, args=(stderr, self._stderr), daemon=True,
                         name="nkibot-zygote-stderr").start()

    def close(self) -> None:
        if self._started is not None:
            self._started.close()
            self._started = None
        self.broken = self.broken or "closed"

    def serves(self, argv: Sequence[str], *, network: bool, cwd: Path | None,
               memory_mb: int | None, confinement: Confinement) -> bool:
        """Whether this child can run here: a torch child, in a view the server has."""
        if self.broken is not None or self._started is None or network or cwd is not None:
            return False
        if memory_mb is None or memory_mb > self.memory_mb:
            return False
        if list(argv[:5]) != [sys.executable, "-I", "-c", BOOT,
                              str(view.nkibot_dir().parent)]:
            return False
        if len(argv) != 6 or argv[5] not in MODULES:
            return False
        if not confinement.torch or confinement.processes or confinement.devices:
            return False
        return (all(self._inside(p, (self.root, *self.readable))
                    for p in confinement.readable)
                and all(self._inside(p, (self.root,)) for p in confinement.writable))

    @staticmethod
    def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
        found = Path(path).resolve()
        return any(found == r or r in found.parents for r in roots)

    def run(self, argv: Sequence[str], stdin: bytes, *, timeout_s: float,
            memory_mb: int | None, cpu_s: int | None, extra_env: dict[str, str] | None,
            confinement: Confinement) -> SandboxOutcome | None:
        """Run one torch child forked from the server; None: run it cold instead."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if not self._await_ready():
                return None
            return self._run(argv[5], stdin, timeout_s, memory_mb, cpu_s, extra_env,
                             confinement)
        finally:
            self._lock.release()

    def _await_ready(self) -> bool:
        if self._ready:
            return True
        try:
            line = self._readline(time.monotonic() + READY_S)
        except _Broken as exc:
            self._break(f"the warm sandbox did not start: {exc}")
            return False
        if line != b"ready\n":
            self._break(f"the warm sandbox did not start: {line[:200]!r}")
            return False
        self._ready = True
        return True

    def _run(self, module: str, stdin: bytes, timeout_s: float, memory_mb: int | None,
             cpu_s: int | None, extra_env: dict[str, str] | None,
             confinement: Confinement) -> SandboxOutcome | None:
        assert self._started is not None
        self._open_to_sandbox(confinement)
        watch = (self.root,)
        limit = write_limit(Confinement(writable=watch, write_limit=confinement.write_limit))
        request = {"module": module, "env": child_env(self.root, extra_env),
                   "memory_mb": memory_mb, "cpu_s": cpu_s or max(1, int(timeout_s) + 1),
                   "timeout_s": timeout_s, "caps": [STDOUT_CAP, STDERR_CAP],
                   "stdin": len(stdin)}
        started = time.monotonic()
        deadline = started + timeout_s + GRACE_S
        done, hit = threading.Event(), [None]
        watcher = threading.Thread(target=_watch, args=(self, watch, limit, done, hit),
                                   daemon=True, name="nkibot-zygote-watch")
        watcher.start()
        try:
            self._write(json.dumps(request).encode() + b"\n" + stdin, deadline)
            reply = self._reply(deadline)
        except _Broken as exc:
            timed_out = time.monotonic() >= deadline
            self._break(f"the warm sandbox stopped answering: {exc}")
            if hit[0] is None and not timed_out:
                return None  # not this run's verdict to give: it runs cold
            return self._outcome(-9, b"", b"", timed_out, started, memory_mb, hit[0])
        finally:
            done.set()
            watcher.join()
        code, out, err, timed_out = reply
        self.runs += 1
        return self._outcome(code, out, err, timed_out, started, memory_mb, hit[0])

    def _outcome(self, code: int, out: bytes, err: bytes, timed_out: bool, started: float,
                 memory_mb: int | None, hit: str | None) -> SandboxOutcome:
        labels = list(self._started.isolation) if self._started is not None else []
        return SandboxOutcome(
            returncode=code, stdout=out, stderr=err, timed_out=timed_out,
            killed_by_signal=-code if code < 0 and not timed_out else None,
            isolation=[*labels, "warm: forked from the conversion's torch sandbox"],
            seconds=time.monotonic() - started, memory_mb=memory_mb, write_limit_hit=hit)

    def _reply(self, deadline: float) -> tuple[int, bytes, bytes, bool]:
        line = self._readline(deadline)
        try:
            header = json.loads(line)
            code, timed_out = header["code"], header["timed_out"]
            sizes = int(header["stdout"]), int(header["stderr"])
        except (ValueError, KeyError, TypeError) as exc:
            raise _Broken(f"a reply that is not one: {line[:200]!r}") from exc
        caps = (sum(STDOUT_CAP) + 128, sum(STDERR_CAP) + 128)
        if not isinstance(code, int) or not isinstance(timed_out, bool) or any(
                n < 0 or n > cap for n, cap in zip(sizes, caps, strict=True)):
            raise _Broken(f"a reply out of bounds: {line[:200]!r}")
        data = self._read(sizes[0] + sizes[1], deadline)
        return code, data[:sizes[0]], data[sizes[0]:], timed_out

    def _readline(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            if len(self._buffer) > 4096:
                raise _Broken("a line longer than any reply")
            self._fill(deadline)
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        return line + b"\n"

    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            self._fill(deadline)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _fill(self, deadline: float) -> None:
        assert self._started is not None and self._started.proc.stdout is not None
        fd = self._started.proc.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _Broken("no answer by the deadline")
        data = os.read(fd, 1 << 20)
        if not data:
            raise _Broken("it exited")
        self._buffer += data

    def _write(self, data: bytes, deadline: float) -> None:
        assert self._started is not None and self._started.proc.stdin is not None
        fd = self._started.proc.stdin.fileno()
        view_ = memoryview(data)
        while view_:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise _Broken("it took no request by the deadline")
            try:
                view_ = view_[os.write(fd, view_[:65536]):]
            except OSError as exc:
                raise _Broken(f"it took no request: {exc}") from exc

    def _open_to_sandbox(self, confinement: Confinement) -> None:
        """What the parent made for this run under the work directory, shown to the
        sandbox uid as a cold child's view would: its inputs readable, its outputs its own."""
        found, policy = isolation.current(), isolation.policy()
        for path in (*confinement.readable, *confinement.writable):
            path = Path(path).resolve()
            if path != self.root and self.root in path.parents:
                for folder in path.parents[:path.parents.index(self.root)]:
                    folder.chmod(folder.stat().st_mode | 0o111)  # traversable, not listable
        for path in confinement.readable:
            if self._inside(path, (self.root,)):
                for entry in [Path(path), *Path(path).rglob("*")]:
                    if not entry.is_symlink():
                        entry.chmod(0o755 if entry.is_dir() else 0o644)
        if found.switch_uid:
            for path in confinement.writable:
                os.chown(path, policy.uid, policy.gid)

    def _break(self, reason: str) -> None:
        self.broken = reason
        if self._started is not None:
            self._started.close()
            self._started = None

    def kill(self) -> None:
        """Kill the whole sandbox (the write-limit watcher's answer)."""
        if self._started is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._started.proc.pid, signal.SIGKILL)

    def stderr(self) -> str:
        """The server's own stderr (what failed, when it did not start)."""
        return self._stderr.value().decode("utf-8", "replace")


def _drain(stream: Any, sink: Capped) -> None:
    with contextlib.suppress(OSError, ValueError):
        for chunk in iter(lambda: stream.read1(65536), b""):
            sink.add(chunk)


def _watch(zygote: Zygote, paths: tuple[Path, ...], limit: int, done: threading.Event,
           hit: list[str | None]) -> None:
    while not done.wait(WATCH_S):
        reason = over_limit(paths, limit)
        if reason is not None:
            hit[0] = reason
            zygote.kill()
            return


_active: ContextVar[Zygote | None] = ContextVar("nkibot_zygote", default=None)


@contextlib.contextmanager
def session(readable: Sequence[Path] = (), *, enabled: bool = True) -> Iterator[Zygote | None]:
    """A warm torch sandbox for one conversion, started now and closed at the end (None
    where it is turned off or this host gives less than full isolation)."""
    if not enabled or isolation.current().level != "full":
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="nkibot-warm-"))
    zygote = Zygote(root, readable)
    zygote.start()
    token = _active.set(zygote)
    try:
        yield zygote
    finally:
        _active.reset(token)
        zygote.close()
        shutil.rmtree(root, ignore_errors=True)


def workdir() -> Path | None:
    """Where this conversion's children's directories go: the warm sandbox's work
    directory (so that its view holds them), else None (the temp root)."""
    zygote = _active.get()
    return zygote.root if zygote is not None and zygote.broken is None else None


def run(argv: list[str], stdin: bytes = b"", *, timeout_s: float,
        memory_mb: int | None = 8192, cpu_s: int | None = None,
        extra_env: dict[str, str] | None = None, network: bool = False,
        cwd: Path | None = None, confinement: Confinement = REFERENCE) -> SandboxOutcome:
    """`run_sandboxed`, forked from the conversion's warm sandbox where it serves."""
    zygote = _active.get()
    if zygote is not None and zygote.serves(argv, network=network, cwd=cwd,
                                            memory_mb=memory_mb, confinement=confinement):
        outcome = zygote.run(argv, stdin, timeout_s=timeout_s, memory_mb=memory_mb,
                             cpu_s=cpu_s, extra_env=extra_env, confinement=confinement)
        if outcome is not None:
            return outcome
    return run_sandboxed(argv, stdin, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                         extra_env=extra_env, network=network, cwd=cwd,
                         confinement=confinement)
