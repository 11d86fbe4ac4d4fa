"""Run untrusted Python (user reference modules, generated kernels) in a child process.

The child gets an environment with no credentials (an allow-list of harmless
variables, never GitHub, Anthropic or AWS secrets), a fresh temporary working
directory, RLIMIT_AS / RLIMIT_CPU / no core dumps, a wall-clock timeout that kills its
whole process group, and no network namespace where the host permits `unshare -n`.
Which of these were applied is reported in `SandboxOutcome.isolation`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Variables a child may inherit: locale, time zone, and numeric-library switches that
# keep results correct on some CPUs. Nothing that can carry a credential.
_INHERITED = ("LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


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
        if "MemoryError" in tail[0] or "Cannot allocate memory" in tail[0]:
            return f"ran out of memory (limit {self.memory_mb} MiB): {tail[0]}"
        return f"child exited with status {self.returncode}: {tail[0]}"


@functools.cache
def network_isolation_available() -> bool:
    """True when `unshare -n` (as root) or `unshare -rn` (user namespaces) works here."""
    return _unshare_prefix() is not None


@functools.cache
def _unshare_prefix() -> tuple[str, ...] | None:
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for prefix in ((exe, "-n"), (exe, "-rn")):
        try:
            probe = subprocess.run(
                [*prefix, "true"], capture_output=True, timeout=10, check=False
            )
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


def python_module_argv(module: str, *args: str) -> list[str]:
    """argv that runs `python -I -m module`: isolated mode ignores PYTHON* variables and cwd."""
    return [sys.executable, "-I", "-m", module, *args]


def _limits(memory_mb: int | None, cpu_s: int | None) -> None:
    # Runs in the child between fork and exec.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb is not None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))


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
) -> SandboxOutcome:
    """Run `argv` isolated; never raises for anything the child does."""
    isolation = ["env", "tmpdir", "rlimits"]
    prefix: tuple[str, ...] = ()
    if not network and (found := _unshare_prefix()) is not None:
        prefix = found
        isolation.append("netns")
    cpu = cpu_s if cpu_s is not None else max(1, int(timeout_s) + 1)
    with tempfile.TemporaryDirectory(prefix="nkibot-sbx-") as tmp:
        work = cwd or Path(tmp)
        started = time.monotonic()
        proc = subprocess.Popen(
            [*prefix, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env=child_env(Path(tmp), extra_env),
            start_new_session=True,
            preexec_fn=functools.partial(_limits, memory_mb, cpu),
        )
        timed_out = False
        try:
            out, err = proc.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = proc.communicate()
        seconds = time.monotonic() - started
    code = proc.returncode
    return SandboxOutcome(
        returncode=code,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
        killed_by_signal=-code if code < 0 and not timed_out else None,
        isolation=isolation,
        seconds=seconds,
        memory_mb=memory_mb,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
