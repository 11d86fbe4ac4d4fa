"""Which isolation this host can give a sandboxed child, and the policy that asks for it.

`full` needs bubblewrap, libseccomp, working unprivileged user namespaces and a runner
that can switch to the sandbox uid (root). Anything less is `reduced`, with each missing
piece named and a fix; the runner refuses untrusted jobs then unless the operator set
`NKIBOT_ALLOW_REDUCED_ISOLATION=1` (`Settings.allow_reduced_isolation`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nkibot.config.settings import Settings
from nkibot.verify import scratch, seccomp

Level = Literal["full", "reduced"]


@dataclass(frozen=True)
class SandboxPolicy:
    """How children are confined; built from Settings at the edge (`configure`)."""

    bwrap: str | None = "bwrap"  # a name on PATH or a path; None: never use bubblewrap
    uid: int = 65534
    gid: int = 65534
    nproc: int = 1024
    allow_reduced: bool = False
    stage_root: Path = Path("/run/nkibot-sandbox")


@dataclass(frozen=True)
class Isolation:
    level: Level
    missing: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    bwrap: str | None = None
    switch_uid: bool = False

    def labels(self) -> list[str]:
        """The result's `isolation` list: the level first, then what is missing."""
        return [f"isolation: {self.level}", *(f"missing: {m}" for m in self.missing)]

    def describe(self) -> str:
        if self.level == "full":
            return ("full: bubblewrap (user, pid, mount, net, ipc, uts namespaces), "
                    "seccomp, separate uid, rlimits")
        return "reduced: " + "; ".join(self.missing)


_policy = SandboxPolicy()


def configure(policy: SandboxPolicy) -> None:
    """Set the process-wide sandbox policy (the CLI and the runner call this once)."""
    global _policy
    _policy = policy


def policy() -> SandboxPolicy:
    return _policy


def policy_from(settings: Settings) -> SandboxPolicy:
    return SandboxPolicy(bwrap=settings.sandbox_bwrap or None, uid=settings.sandbox_uid,
                         gid=settings.sandbox_gid,
                         allow_reduced=settings.allow_reduced_isolation)


def configure_from(settings: Settings) -> Isolation:
    """Configure from Settings at an edge (CLI, runner); returns the isolation in force.
    Where verifications' exchange files go is set here too (`scratch`)."""
    configure(policy_from(settings))
    scratch.configure(settings.scratch_dir)
    return current()


def refusal(found: Isolation, allow_reduced: bool) -> str | None:
    """Why untrusted jobs must not run here, or None when they may."""
    if found.level == "full" or allow_reduced:
        return None
    return ("refusing untrusted jobs: sandbox isolation is reduced ("
            + "; ".join(found.missing) + "). Fix: " + "; ".join(found.fixes)
            + ". Or set NKIBOT_ALLOW_REDUCED_ISOLATION=1 to accept the risk.")


def current() -> Isolation:
    return probe(_policy)


@functools.cache
def probe(policy: SandboxPolicy) -> Isolation:
    missing: list[str] = []
    fixes: list[str] = []
    exe = shutil.which(policy.bwrap) if policy.bwrap else None
    if exe is None:
        missing.append("bubblewrap" + (" (disabled by settings)" if not policy.bwrap else
                                       f" ({policy.bwrap!r} not found)"))
        fixes.append("apt-get install bubblewrap (and unset NKIBOT_SANDBOX_BWRAP)")
    if not seccomp.available():
        missing.append("seccomp (pyseccomp/libseccomp not loadable)")
        fixes.append("apt-get install libseccomp2; pip install pyseccomp")
    switch = os.geteuid() == 0
    if not switch:
        missing.append("separate uid (the runner is not root, so children run as its uid)")
        fixes.append("run the runner as root so children run as the sandbox uid "
                     f"{policy.uid}")
    if exe is not None and not _sized_tmpfs(exe):
        missing.append("bounded scratch (this bubblewrap has no --size for a size-limited "
                       "tmpfs, so a child's scratch could fill the disk)")
        fixes.append("install bubblewrap 0.8 or later")
    if exe is not None:
        problem = _userns_problem(exe, policy if switch else None)
        if problem:
            missing.append(f"namespaces ({problem})")
            fixes.append("enable unprivileged user namespaces: sysctl "
                         "kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000")
    level: Level = "full" if not missing else "reduced"
    return Isolation(level, tuple(missing), tuple(fixes), exe, switch)


def _sized_tmpfs(exe: str) -> bool:
    """Whether bubblewrap takes `--size` before `--tmpfs` (0.8 and later)."""
    try:
        shown = subprocess.run([exe, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--size" in shown.stdout + shown.stderr


def _userns_problem(exe: str, policy: SandboxPolicy | None) -> str | None:
    """None when bubblewrap can build a sandbox here (as the sandbox uid when switching)."""
    def become() -> None:
        if policy is not None:
            os.setgroups([])
            os.setresgid(policy.gid, policy.gid, policy.gid)
            os.setresuid(policy.uid, policy.uid, policy.uid)

    argv = [exe, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
            "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
            "/usr/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, check=False,
                              preexec_fn=become, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)[:200]
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[:200] or f"exit {done.returncode}"
    return None
