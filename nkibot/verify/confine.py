"""First code inside the sandbox: load the no-exec filter, then run the real target.

`python -I -m nkibot.verify.confine HEXBPF -- (-m MODULE | -c CODE) ARGS...`

bubblewrap loads stage 1 of the syscall filter (`nkibot.verify.seccomp`) before it execs
the interpreter, so that exec has to stay allowed there. This module, run before any
untrusted code, loads stage 2, which refuses `execve` for the rest of the process's life.
Standard library only (ctypes), because it runs in every child, torch-free or not.
"""

from __future__ import annotations

import ctypes
import runpy
import sys

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_filter(bpf: bytes) -> None:
    """Install a classic-BPF seccomp program (8 bytes per instruction)."""
    if not bpf or len(bpf) % 8:
        raise ValueError("not a BPF program")
    libc = ctypes.CDLL(None, use_errno=True)
    code = ctypes.create_string_buffer(bpf, len(bpf))
    program = _Program(len(bpf) // 8, ctypes.cast(code, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] != "--" or argv[2] not in ("-m", "-c"):
        print("usage: confine HEXBPF -- (-m MODULE | -c CODE) ARGS...", file=sys.stderr)
        return 2
    load_filter(bytes.fromhex(argv[0]))
    mode, target, rest = argv[2], argv[3], argv[4:]
    if mode == "-m":
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
