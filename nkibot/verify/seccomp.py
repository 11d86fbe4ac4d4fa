"""The sandbox's syscall filters, compiled to BPF with libseccomp (`pyseccomp`).

Two filters, because the interpreter itself has to be exec'd after the first one:
- stage 1, loaded by bubblewrap just before it execs the interpreter: no namespace or
  mount changes, no ptrace or cross-process memory access, no sockets at all, no io_uring
  (which would bypass the socket rule), no kernel keyrings, BPF or perf; and, unless the
  child may run processes, no fork (`clone` is allowed only with CLONE_THREAD; `clone3`
  answers ENOSYS so libc falls back to `clone`, whose flags a filter can read);
- stage 2, loaded by the child (`nkibot.verify.confine`) before any untrusted code runs:
  no `execve`. Together: the interpreter is the only program the sandbox ever executes.

A conversion's warm torch sandbox (`nkibot.verify.zygote`) is started with stage 1 for
processes (it forks) and loads stage 2 itself before importing anything; each process it
forks loads `no_processes` before any untrusted code runs, which gives that process the
same rules as a cold child: no fork, no exec.

Denied calls fail with EPERM (ENOSYS for clone3), so untrusted code gets an ordinary
OSError rather than a dead process; what matters is that the call never happens.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

CLONE_THREAD = 0x00010000
_DENIED = (
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "move_mount",
    "open_tree", "fsopen", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_getfd", "socket", "socketpair", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "open_by_handle_at", "name_to_handle_at", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "personality",
    "acct", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime",
)
_PROCESS_CALLS = ("fork", "vfork", "execveat")


def available() -> bool:
    """True when libseccomp can be loaded (pyseccomp needs libseccomp.so.2)."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError, OSError):
        return False
    return True


@functools.cache
def stage_one(processes: bool) -> bytes:
    """BPF for bubblewrap's `--seccomp`: see the module docstring."""
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED:
        flt.add_rule(sc.ERRNO(errno.EPERM), name)
    if not processes:
        for name in _PROCESS_CALLS:
            flt.add_rule(sc.ERRNO(errno.EPERM), name)
        flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return _export(flt)


@functools.cache
def stage_two() -> bytes:
    """BPF the child loads itself once it runs: `execve` is refused from then on."""
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    flt.add_rule(sc.ERRNO(errno.EPERM), "execve")
    flt.add_rule(sc.ERRNO(errno.EPERM), "execveat")
    return _export(flt)


@functools.cache
def no_processes() -> bytes:
    """BPF a warm sandbox's forked child loads: no fork and no exec (with the stage 1
    rules it inherits, exactly a cold child's filter)."""
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    for name in (*_PROCESS_CALLS, "execve"):
        flt.add_rule(sc.ERRNO(errno.EPERM), name)
    flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    return _export(flt)


def _export(flt: object) -> bytes:
    with tempfile.TemporaryFile() as handle:
        flt.export_bpf(handle)  # type: ignore[attr-defined]
        handle.flush()
        os.lseek(handle.fileno(), 0, os.SEEK_SET)
        return handle.read()
