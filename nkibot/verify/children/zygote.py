"""The warm torch sandbox's server: import torch once, then fork a fresh process per run.

    python -I -m nkibot.verify.children.zygote NO_EXEC_BPF CHILD_BPF

The parent is `nkibot.verify.zygote` (what this is for, and what stays as it was). This
runs inside the sandbox: bubblewrap, the sandbox uid, the namespaces, the rlimits, and
stage 1 of the syscall filter with fork allowed. Before importing anything beyond the
standard library it loads NO_EXEC_BPF (stage 2: no exec, ever) and makes itself
non-dumpable (no process of the same uid can open its memory). Before a forked run
executes any untrusted code it loads CHILD_BPF (no fork, no exec), its own rlimits, a
fresh environment and an empty HOME, and its stdin, stdout and stderr become unnamed
files in the scratch tmpfs: this server keeps no pipe to it.

Protocol on the pipes it was started with (stdin from the parent, stdout to it):
- once its imports are done it writes `ready` (or `failed: REASON`) and a newline;
- per run the parent writes one JSON line {module, env, memory_mb, cpu_s, timeout_s,
  caps, stdin} (stdin: the length of the bytes that follow the line), then those bytes;
- it answers one JSON line {code, timed_out, stdout, stderr} (the lengths of the capped
  outputs that follow), then those bytes.
What it says is a claim: the parent checks the sizes, keeps its own deadline, and kills
the whole sandbox at the first thing out of place.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import runpy
import select
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import IO, Any, NoReturn

from nkibot.verify.confine import load_filter
from nkibot.verify.launch import Limits, set_limits
from nkibot.verify.pipes import capped_file

#: What every torch child imports before it reads its request: torch, and torch._dynamo,
#: which PyTorch imports at the first operator whose meta kernel is written in Python
#: (tracing on the meta device: 1.4 s of the lowering child's 2.6 s).
PRELOAD = ("numpy", "torch", "torch._dynamo", "nkibot.verify.harness",
           "nkibot.verify.children.torch_side", "nkibot.lowering.lower")
_PR_SET_DUMPABLE = 4
_MAXFD = 1024  # the sandbox's RLIMIT_NOFILE


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: zygote NO_EXEC_BPF CHILD_BPF", file=sys.stderr)
        return 2
    sys.dont_write_bytecode = True
    load_filter(bytes.fromhex(argv[0]))
    # The pipes to the parent move to fds of their own; 0 and 1 then name nothing of it.
    chan_in = os.fdopen(os.dup(0), "rb")
    chan_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    sys.stdout = sys.stderr
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_DUMPABLE failed")
    except BaseException as exc:  # the parent runs every child cold then
        chan_out.write(f"failed: {type(exc).__name__}: {exc}\n".encode()[:4096])
        chan_out.flush()
        return 1
    chan_out.write(b"ready\n")
    chan_out.flush()
    return serve(chan_in, chan_out, bytes.fromhex(argv[1]))


def serve(chan_in: IO[bytes], chan_out: IO[bytes], child_filter: bytes) -> int:
    """Answer runs until the parent closes the pipe."""
    home = Path(os.environ.get("HOME", tempfile.gettempdir()))
    count = 0
    while True:
        line = chan_in.readline()
        if not line:
            return 0
        request = json.loads(line)
        data = chan_in.read(int(request["stdin"]))
        count += 1
        reply, out, err = run_one(request, data, home, count, child_filter)
        chan_out.write(json.dumps(reply).encode() + b"\n" + out + err)
        chan_out.flush()


def run_one(request: dict[str, Any], data: bytes, home: Path, count: int,
            child_filter: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """Fork one run, wait for it until its deadline, and collect its capped outputs."""
    own = home / f"run{count}"
    own.mkdir(mode=0o700)
    files = [os.open(home, os.O_TMPFILE | os.O_RDWR, 0o600) for _ in range(3)]
    try:
        os.write(files[0], data)
        os.lseek(files[0], 0, os.SEEK_SET)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, files, own, child_filter)
        pidfd = os.pidfd_open(pid)
        try:
            ended, _, _ = select.select([pidfd], [], [], float(request["timeout_s"]))
        finally:
            os.close(pidfd)
        if not ended:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        (out_head, out_tail), (err_head, err_tail) = request["caps"]
        out = capped_file(files[1], out_head, out_tail)
        err = capped_file(files[2], err_head, err_tail)
    finally:
        for fd in files:
            os.close(fd)
        shutil.rmtree(own, ignore_errors=True)
    reply = {"code": os.waitstatus_to_exitcode(status), "timed_out": not ended,
             "stdout": len(out), "stderr": len(err)}
    return reply, out, err


def _child(request: dict[str, Any], files: list[int], own: Path,
           child_filter: bytes) -> NoReturn:
    """The forked run: confine it, then run its module as `python -m` would."""
    code = 1
    try:
        for target, fd in enumerate(files):
            os.dup2(fd, target)
        os.closerange(3, _MAXFD)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        os.chdir(own)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        os.environ["HOME"] = os.environ["TMPDIR"] = str(own)
        tempfile.tempdir = None
        set_limits(Limits(request["memory_mb"], request["cpu_s"], None))
        load_filter(child_filter)
        sys.argv = [request["module"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:  # the run's failure is its outcome, as for a cold child
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):  # nothing is left to tell
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
