"""Between fork and exec of bubblewrap: stage paths, become the sandbox uid, set limits.

Runs in the forked child (subprocess `preexec_fn`), so it only makes system calls.
- Staging (runner is root, see `view`): a private mount namespace for the launcher, in
  which each unreachable host path is bind-mounted onto a directory the sandbox uid can
  traverse. bubblewrap then builds the real sandbox from those.
- The uid switch: groups cleared, then gid and uid set for real, effective and saved.
  bubblewrap then runs unprivileged and maps that uid into its user namespace, so the
  child's files and signals are those of an unprivileged host user: a root-owned 0600
  file is unreadable to it even if it were in view.
- Limits, inherited through bubblewrap: no core dumps, address space, CPU seconds,
  processes for that uid, file size and open files.
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def cores() -> int:
    """The cores this process may run on (`os.process_cpu_count` from Python 3.13)."""
    counted = getattr(os, "process_cpu_count", None)
    found = counted() if counted is not None else len(os.sched_getaffinity(0))
    return max(1, found or 1)


@dataclass(frozen=True)
class Limits:
    memory_mb: int | None
    cpu_s: int | None
    nproc: int | None
    fsize_mb: int = 2048
    nofile: int = 1024


@dataclass(frozen=True)
class Launch:
    """Everything the forked launcher does before it execs bubblewrap."""

    limits: Limits
    uid: int | None = None  # None: keep the runner's uid
    gid: int | None = None
    staged: tuple[tuple[Path, Path], ...] = ()

    def __call__(self) -> None:
        if self.staged:
            _stage(self.staged)
        if self.uid is not None and self.gid is not None:
            os.setgroups([])
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)
        set_limits(self.limits)


def set_limits(limits: Limits) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.memory_mb is not None:
        size = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if limits.cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    if limits.nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))
    size = limits.fsize_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))


def _stage(staged: tuple[tuple[Path, Path], ...]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) for staging failed")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making the launcher's mounts private failed")
    for source, stage in staged:
        if libc.mount(os.fsencode(source), os.fsencode(stage), None,
                      _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"staging {source} failed")
