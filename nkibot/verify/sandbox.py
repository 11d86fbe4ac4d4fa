"""Run untrusted Python (reference modules, kernels, lowering traces, Triton launchers).

Full isolation (`isolation.current().level == "full"`): the child runs under bubblewrap
as an unprivileged sandbox uid, in new user, pid, mount, network, IPC and UTS
namespaces, with no capabilities, no-new-privileges, the two-stage seccomp filter
(`seccomp`: no namespaces, mounts, ptrace, sockets, forks or execs beyond the
interpreter), rlimits, and a view of the host (`view`) that holds only the Python
install, nkibot, its inputs (read-only) and one private scratch directory. The child's
pid namespace dies with its first process; on a time-out the launcher's process group
is killed and `--die-with-parent` takes the namespace with it, so nothing survives a run.

Whatever the isolation, the child's writable directories (its output directories, on
the host's disk) are watched while it runs: files there are capped one by one by
RLIMIT_FSIZE, and in all by `Confinement.write_limit` (default: a quarter of the disk
space free when the run starts, `write_limit`); a child that writes more, or more than
`WATCH_ENTRIES` files, is killed and its outcome says which limit it hit.

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

__all__ = ["KERNEL", "REFERENCE", "Confinement", "SandboxOutcome", "Started", "child_env",
           "python_module_argv", "run_sandboxed", "start_confined"]

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
    #: The limit on the child's writable directories it went over (it was killed), if any.
    write_limit_hit: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.write_limit_hit is None

    def reason(self) -> str:
        """One line saying why the child failed, for feedback and check runs."""
        if self.write_limit_hit is not None:
            return self.write_limit_hit
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


#: How often the writable directories are measured, and the most files they may hold.
WATCH_S = 0.2
WATCH_ENTRIES = 100_000


def write_limit(confinement: Confinement) -> int:
    """The most bytes the child may leave in its writable directories: the confinement's
    limit, and never more than a quarter of the disk space free when it starts."""
    free = [shutil.disk_usage(p).free for p in confinement.writable if p.exists()]
    share = min(free, default=0) // 4
    return min(confinement.write_limit or share, share) if free else (
        confinement.write_limit or 0)


def written(paths: tuple[Path, ...], limit: int) -> tuple[int, int]:
    """Bytes (by lstat: nothing followed, sparse files at their size) and entries under
    `paths`, counted until either passes its limit."""
    total = entries = 0
    stack = [str(p) for p in paths]
    while stack and total <= limit and entries <= WATCH_ENTRIES:
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    entries += 1
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_size
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue  # removed while counted, or closed to us: counted as nothing
    return total, entries


def over_limit(paths: tuple[Path, ...], limit: int) -> str | None:
    """Why the writable directories are over their limits, or None."""
    total, entries = written(paths, limit)
    if total > limit:
        return (f"the run wrote more than {limit // 2**20} MiB to its output directories "
                "(the most this run's outputs can take); child killed")
    if entries > WATCH_ENTRIES:
        return (f"the run left more than {WATCH_ENTRIES} files in its output directories; "
                "child killed")
    return None


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
            watch = (confinement.writable, write_limit(confinement))
            out, err, code, timed_out, hit = _run(command, stdin, env, cwd or scratch,
                                                  launch, fds, started + timeout_s, watch)
        finally:
            for fd in fds:
                os.close(fd)
        seconds = time.monotonic() - started
    if command[0] == found.bwrap and code > 128:
        code = 128 - code  # bubblewrap reports a child killed by signal N as 128 + N
    return SandboxOutcome(returncode=code, stdout=out, stderr=err, timed_out=timed_out,
                          killed_by_signal=-code if code < 0 and not timed_out else None,
                          isolation=labels, seconds=seconds, memory_mb=memory_mb,
                          write_limit_hit=hit)


@dataclass
class Started:
    """A long-lived child under full isolation (a conversion's warm sandbox): its process,
    its isolation labels and its host scratch directory, removed by `close`."""

    proc: subprocess.Popen[bytes]
    isolation: list[str]
    scratch: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        """Kill the child's whole sandbox and remove its scratch; safe to call twice."""
        _kill_group(self.proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=DRAIN_S)
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.scratch.cleanup()


def start_confined(argv: list[str], *, memory_mb: int | None, cpu_s: int | None,
                   confinement: Confinement, extra_env: dict[str, str] | None = None
                   ) -> Started | None:
    """Start `argv` under full isolation, with pipes to its stdin, stdout and stderr, and
    return at once; None where this host gives less than full isolation (a long-lived
    child is only ever a fully confined one). The caller owns the pipes and `close`s it.
    """
    found = isolation.current()
    if found.level != "full":
        return None
    policy = isolation.policy()
    tmp = tempfile.TemporaryDirectory(prefix="nkibot-sbx-")
    scratch = Path(tmp.name)
    env = child_env(scratch, extra_env)
    fds: tuple[int, ...] = ()
    try:
        command, launch, fds = _full(argv, env, scratch, confinement, found, policy,
                                     Limits(memory_mb, cpu_s, policy.nproc))
        with _SPAWN:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=scratch, env=env,
                                    pass_fds=fds, start_new_session=True, preexec_fn=launch)
    except BaseException:
        tmp.cleanup()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return Started(proc, found.labels() + _applied(confinement), tmp)


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
         fds: tuple[int, ...], deadline: float, watch: tuple[tuple[Path, ...], int]
         ) -> tuple[bytes, bytes, int, bool, str | None]:
    out, err = Capped(*STDOUT_CAP), Capped(*STDERR_CAP)
    with _SPAWN:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=cwd, env=env, pass_fds=fds,
                                start_new_session=True, preexec_fn=launch)
    done, hit = threading.Event(), [None]
    watcher = threading.Thread(target=_watch, args=(proc, *watch, done, hit), daemon=True,
                               name="nkibot-watch")
    if watch[0]:
        watcher.start()
    try:
        timed_out = pump(proc, stdin, out, err, deadline)
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
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
    # The child may have written past the limit in its last moments: measured once more.
    reason = hit[0] or (over_limit(*watch) if watch[0] else None)
    return out.value(), err.value(), proc.returncode, timed_out, reason


def _watch(proc: subprocess.Popen[bytes], paths: tuple[Path, ...], limit: int,
           done: threading.Event, hit: list[str | None]) -> None:
    """Measure the writable directories every WATCH_S until the run ends; over a limit,
    record why and kill the run's process group (its output pipes then close)."""
    while not done.wait(WATCH_S):
        reason = over_limit(paths, limit)
        if reason is not None:
            hit[0] = reason
            _kill_group(proc)
            return


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
