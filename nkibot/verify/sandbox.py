"""Run untrusted Python (reference modules, kernels, lowering traces, Triton launchers).

Full isolation (`isolation.current().level == "full"`): the child runs under bubblewrap
as an unprivileged sandbox uid, in new user, pid, mount, network, IPC and UTS
namespaces, with no capabilities, no-new-privileges, the two-stage seccomp filter
(`seccomp`: no namespaces, mounts, ptrace, sockets, forks or execs beyond the
interpreter), rlimits, and a view of the host (`view`) that holds only the Python
install, nkibot, its inputs (read-only) and one private scratch directory. The child's
pid namespace dies with its first process; on a time-out the launcher's process group
is killed and `--die-with-parent` takes the namespace with it, so nothing survives a run.

Reduced isolation (a host without bubblewrap or user namespaces): the old confinement
(credential-free environment, rlimits, `unshare -n` where allowed), with the result
saying so. Either way, stdout/stderr are read incrementally with a capped head and tail.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from nkibot.verify import isolation, seccomp, view
from nkibot.verify.launch import Launch, Limits
from nkibot.verify.pipes import Capped, pump
from nkibot.verify.view import KERNEL, REFERENCE, Confinement

__all__ = ["KERNEL", "REFERENCE", "Confinement", "SandboxOutcome", "child_env",
           "python_module_argv", "run_sandboxed"]

# Variables a child may inherit: locale, time zone, and numeric-library switches that
# keep results correct on some CPUs. Nothing that can carry a credential.
_INHERITED = ("LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
STDOUT_CAP = (64 * 1024, 4 * 1024 * 1024)  # head, tail
STDERR_CAP = (64 * 1024, 256 * 1024)
DRAIN_S = 2.0


@dataclass(frozen=True)
class SandboxOutcome:
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    killed_by_signal: int | None
    isolation: list[str] = field(default_factory=list)
    seconds: float = 0.0
    memory_mb: int | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def reason(self) -> str:
        """One line saying why the child failed, for feedback and check runs."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (wall-clock limit); process killed"
        if self.killed_by_signal is not None:
            name = signal.Signals(self.killed_by_signal).name
            hint = {
                "SIGSEGV": "segmentation fault",
                "SIGKILL": "killed (likely the memory limit)",
                "SIGXCPU": "CPU-time limit exceeded",
                "SIGABRT": "aborted",
            }.get(name, "terminated by a signal")
            return f"child process {hint} ({name})"
        tail = self.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if DISK_FULL in tail[0]:
            return f"{disk_full_reason()}: {tail[0]}"
        if "MemoryError" in tail[0] or "Cannot allocate memory" in tail[0]:
            return f"ran out of memory (limit {self.memory_mb} MiB): {tail[0]}"
        return f"child exited with status {self.returncode}: {tail[0]}"


#: strerror(ENOSPC), in the child's exception when its scratch (or a disk) is full.
DISK_FULL = "No space left on device"


def disk_full_reason() -> str:
    return (f"the run's scratch space is full (a {view.SCRATCH_MB} MiB tmpfs per child; "
            "write less to HOME or TMPDIR)")


def network_isolation_available() -> bool:
    """True when children get a network namespace (full isolation, or `unshare -n`)."""
    return isolation.current().level == "full" or _unshare_prefix() is not None


def _unshare_prefix() -> tuple[str, ...] | None:
    return _unshare_probe()


@functools.cache
def _unshare_probe() -> tuple[str, ...] | None:
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for prefix in ((exe, "-n"), (exe, "-rn")):
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10,
                                   check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def child_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: an allow-list, a private HOME, single-threaded BLAS."""
    env = {key: os.environ[key] for key in _INHERITED if key in os.environ}
    python_dir = str(Path(sys.executable).parent)
    env.update(
        PATH=f"{python_dir}:{_SAFE_PATH}",
        HOME=str(home),
        TMPDIR=str(home),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
    )
    env.update(extra or {})
    return env


#: `python -m`, after putting the folder that holds the parent's own nkibot first on
#: sys.path (argv: ROOT MODULE ARGS...). Isolated mode ignores PYTHONPATH and the cwd, so
#: `python -I -m` alone imports whichever nkibot the interpreter's site-packages names: in
#: a second checkout, another checkout's editable install, which the sandbox does not show
#: (or, with reduced isolation, silently runs).
BOOT = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def python_module_argv(module: str, *args: str) -> list[str]:
    """argv that runs `module` as `python -I -m` does, from the parent's own nkibot."""
    return [sys.executable, "-I", "-c", BOOT, str(view.nkibot_dir().parent), module, *args]


def run_sandboxed(
    argv: list[str],
    stdin: bytes = b"",
    *,
    timeout_s: float,
    memory_mb: int | None = 8192,
    cpu_s: int | None = None,
    extra_env: dict[str, str] | None = None,
    network: bool = False,
    cwd: Path | None = None,
    confinement: Confinement = REFERENCE,
) -> SandboxOutcome:
    """Run `argv` (a `python` command line) confined; never raises for what the child does."""
    found = isolation.current()
    policy = isolation.policy()
    cpu = cpu_s if cpu_s is not None else max(1, int(timeout_s) + 1)
    with tempfile.TemporaryDirectory(prefix="nkibot-sbx-") as tmp:
        scratch = Path(tmp)
        env = child_env(scratch, extra_env)
        if found.level == "full" and not network:
            command, launch, fds = _full(argv, env, scratch, confinement, found, policy,
                                         Limits(memory_mb, cpu, policy.nproc))
            labels = found.labels() + _applied(confinement)
        else:
            command, fds = _reduced(argv, network), ()
            launch = Launch(Limits(memory_mb, cpu, None))
            labels = (["isolation: reduced", "missing: bubblewrap sandbox (network wanted)"]
                      if network else found.labels()) + _reduced_applied(command, argv) + [
                "unbounded scratch: a host directory, RLIMIT_FSIZE caps each file only"]
        started = time.monotonic()
        try:
            out, err, code, timed_out = _run(command, stdin, env, cwd or scratch, launch,
                                             fds, started + timeout_s)
        finally:
            for fd in fds:
                os.close(fd)
        seconds = time.monotonic() - started
    if command[0] == found.bwrap and code > 128:
        code = 128 - code  # bubblewrap reports a child killed by signal N as 128 + N
    return SandboxOutcome(returncode=code, stdout=out, stderr=err, timed_out=timed_out,
                          killed_by_signal=-code if code < 0 and not timed_out else None,
                          isolation=labels, seconds=seconds, memory_mb=memory_mb)


def _applied(confinement: Confinement) -> list[str]:
    applied = ["env", "tmpdir", "rlimits", "userns", "pidns", "mountns", "netns", "ipcns",
               "utsns", "seccomp", "uid", f"scratch-tmpfs {view.SCRATCH_MB} MiB"]
    return applied + ([] if confinement.torch else ["no-torch"])


def _reduced_applied(command: list[str], argv: list[str]) -> list[str]:
    return ["env", "tmpdir", "rlimits"] + (["netns"] if len(command) > len(argv) else [])


def _reduced(argv: list[str], network: bool) -> list[str]:
    prefix = _unshare_prefix() if not network else None
    return [*(prefix or ()), *argv]


def _full(argv: list[str], env: dict[str, str], scratch: Path, confinement: Confinement,
          found: isolation.Isolation, policy: isolation.SandboxPolicy, limits: Limits
          ) -> tuple[list[str], Launch, tuple[int, ...]]:
    switch = found.switch_uid
    uid, gid = (policy.uid, policy.gid) if switch else (os.getuid(), os.getgid())
    if switch:
        for path in (scratch, *confinement.writable):
            os.chown(path, uid, gid)
        policy.stage_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    plan = view.Plan(uid, gid, policy.stage_root if switch else None,
                     scratch / ".inputs" if switch else None)
    view.build(plan, confinement, scratch)
    for _, stage in plan.staged:
        stage.mkdir(mode=0o755, exist_ok=True)
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(seccomp.stage_one(confinement.processes))
    assert found.bwrap is not None
    command = [found.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
               "--die-with-parent", "--new-session", "--cap-drop", "ALL",
               "--hostname", "nkibot-sandbox", *plan.args, "--chdir", str(scratch),
               "--clearenv", *[a for k, v in env.items() for a in ("--setenv", k, v)],
               "--seccomp", str(read_end), "--", *_confined(argv, confinement)]
    launch = Launch(limits, uid if switch else None, gid if switch else None,
                    tuple(plan.staged))
    return command, launch, (read_end,)


def _confined(argv: list[str], confinement: Confinement) -> list[str]:
    """`python_module_argv(X, ...)` (or `python [-I] -m X ...` / `-c CODE ...`) becomes
    `python_module_argv("nkibot.verify.confine", BPF, "--", "-m", X, ...)`."""
    if confinement.processes:
        return argv
    if argv[1:4] == ["-I", "-c", BOOT]:
        tail = ["-m", *argv[5:]]
    else:
        tail = argv[1 + len([a for a in argv[1:3] if a == "-I"]):]
    return python_module_argv("nkibot.verify.confine", seccomp.stage_two().hex(), "--", *tail)


#: One fork at a time: `preexec_fn` runs Python between fork and exec, which is only safe
#: while no other thread of ours is forking (the determinism pair may run side by side).
_SPAWN = threading.Lock()


def _run(command: list[str], stdin: bytes, env: dict[str, str], cwd: Path, launch: Launch,
         fds: tuple[int, ...], deadline: float) -> tuple[bytes, bytes, int, bool]:
    out, err = Capped(*STDOUT_CAP), Capped(*STDERR_CAP)
    with _SPAWN:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=cwd, env=env, pass_fds=fds,
                                start_new_session=True, preexec_fn=launch)
    timed_out = pump(proc, stdin, out, err, deadline)
    _kill_group(proc)  # whatever is left of the run goes, on time-out or not
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=DRAIN_S)
    if timed_out:
        pump(proc, b"", out, err, time.monotonic() + DRAIN_S)
    if proc.returncode is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return out.value(), err.value(), proc.returncode, timed_out


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
