"""What a sandboxed child can see: the bubblewrap mount plan (pure, no I/O beyond stat).

The child's root is an empty tmpfs. Into it go, read-only: /usr (and the /bin, /lib...
links), a few harmless files of /etc, the Python install, the venv and the nkibot
package; then the run's inputs (read-only), its outputs (writable) and one private
scratch directory: a tmpfs of `SCRATCH_MB` MiB (bubblewrap's `--size`), so a child
cannot fill the host's disk through it. Nothing else of the host exists there: no /tmp, no /home, no
/run (secrets), no host /proc (a fresh one shows only the sandbox's own processes), no
host sockets. A child that must not see torch gets each site-packages directory as a
tmpfs holding only an allow-list of entries (NumPy, ml_dtypes, nkibot).

When the runner is root and the child runs as another uid, paths the child's uid cannot
traverse (a Python install under /root, mode 0700) are "staged": bind-mounted, in a
private mount namespace of the launcher, onto directories the sandbox uid can reach.
A readable input that is itself closed to that uid (a 0700 temporary directory holding
the user's module) is copied into the run's scratch instead (no .git, files up to
16 MiB, 256 MiB in all) and the copy is shown read-only at the original path.
"""

from __future__ import annotations

import os
import shutil
import site
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nkibot

ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group",
             "/etc/nsswitch.conf")
TOP_LINKS = ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")
COPY_FILE_MB, COPY_TOTAL_MB = 16, 256
#: site-packages entries a torch-free child keeps (everything the kernel side imports).
KERNEL_SITE_ENTRIES = ("numpy", "numpy.libs", "ml_dtypes", "nkibot", "_distutils_hack")


@dataclass(frozen=True)
class Confinement:
    """What one child may see and do beyond the defaults (see the module docstring)."""

    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    #: False: torch (and every package not in KERNEL_SITE_ENTRIES) is not in the view.
    torch: bool = True
    #: True: fork and exec are allowed (the Neuron compiler runs programs).
    processes: bool = False
    devices: tuple[str, ...] = ()
    #: The most bytes the child may leave in its writable directories in all (the sandbox
    #: watches them and stops a child that writes more); None: `sandbox.write_limit`'s
    #: default, a share of the free disk.
    write_limit: int | None = None


REFERENCE = Confinement()
KERNEL = Confinement(torch=False)


def reachable(path: Path, uid: int, gid: int) -> bool:
    """True when `uid`/`gid` (no supplementary groups) can reach `path` and read it
    (list and enter it, for a directory)."""
    current = Path("/")
    for part in path.parts[1:]:
        try:
            info = current.stat()
        except OSError:
            return False
        if stat.S_ISDIR(info.st_mode) and not _may(info, uid, gid, stat.S_IXUSR):
            return False
        current = current / part
    try:
        info = path.stat()
    except OSError:
        return False
    return _opens(info, uid, gid)


def _opens(info: os.stat_result, uid: int, gid: int) -> bool:
    need = [stat.S_IRUSR] + ([stat.S_IXUSR] if stat.S_ISDIR(info.st_mode) else [])
    return all(_may(info, uid, gid, bit) for bit in need)


def _may(info: os.stat_result, uid: int, gid: int, user_bit: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & user_bit)
    if info.st_gid == gid:
        return bool(info.st_mode & (user_bit >> 3))
    return bool(info.st_mode & (user_bit >> 6))


@dataclass
class Plan:
    """bubblewrap mount arguments, plus the host paths to stage before it starts."""

    uid: int
    gid: int
    stage_root: Path | None
    copies: Path | None = None  # where closed readable inputs are copied (in the scratch)
    args: list[str] = field(default_factory=list)
    staged: list[tuple[Path, Path]] = field(default_factory=list)

    def source(self, path: Path) -> Path:
        """The host path bubblewrap should bind for `path` (staged when unreachable)."""
        for original, stage in self.staged:
            if path == original or original in path.parents:
                return stage / path.relative_to(original)
        if self.stage_root is None or reachable(path, self.uid, self.gid):
            return path
        stage = self.stage_root / f"m{len(self.staged)}"
        self.staged.append((path, stage))
        return stage

    def bind(self, path: Path, *, writable: bool = False) -> None:
        if not path.exists():
            return
        source = self.source(path)
        if not writable and self.copies is not None and not _opens(path.stat(), self.uid,
                                                                   self.gid):
            source = copy_readable(path, self.copies / f"c{len(self.args)}")
        self.args += ["--bind" if writable else "--ro-bind", str(source), str(path)]


def copy_readable(path: Path, target: Path) -> Path:
    """A world-readable copy of `path` (see the module docstring for what is left out)."""
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if path.is_file():
        shutil.copyfile(path, target)
        target.chmod(0o644)
        return target
    budget = [COPY_TOTAL_MB * 1024 * 1024]

    def skip(directory: str, names: list[str]) -> list[str]:
        left = []
        for name in names:
            full = Path(directory) / name
            size = 0 if full.is_dir() else full.lstat().st_size
            if name == ".git" or full.is_symlink() or size > min(
                    COPY_FILE_MB * 1024 * 1024, budget[0]):
                left.append(name)
            budget[0] -= size
        return left

    shutil.copytree(path, target, ignore=skip)
    for entry in [target, *target.rglob("*")]:
        # The copy must be readable by the sandbox uid; it holds nothing but the inputs.
        entry.chmod(0o755 if entry.is_dir() else 0o644)
    return target


def python_roots() -> list[Path]:
    """The interpreter's install and the venv (deduplicated, resolved)."""
    roots = [Path(sys.base_prefix).resolve(), Path(sys.prefix)]
    return list(dict.fromkeys(roots))


def site_dirs() -> list[Path]:
    found = [Path(p) for p in site.getsitepackages()]
    return [p for p in dict.fromkeys(found) if p.is_dir()]


def nkibot_dir() -> Path:
    return Path(nkibot.__file__).resolve().parent


#: The child's scratch (HOME, TMPDIR, its working directory) is a tmpfs of this size
#: inside the sandbox: RLIMIT_FSIZE caps each file, this caps them all (a child that
#: writes 256 MiB files in a loop gets ENOSPC, not the host's disk).
SCRATCH_MB = 512


def build(plan: Plan, confinement: Confinement, scratch: Path,
          scratch_mb: int | None = SCRATCH_MB) -> None:
    """Fill `plan.args` with the whole mount view for one child (`scratch_mb` None: the
    host's scratch directory is bound as it is, unbounded)."""
    plan.args += ["--ro-bind", "/usr", "/usr"]
    for top in map(Path, TOP_LINKS):
        if top.is_symlink():
            plan.args += ["--symlink", str(top.readlink()), str(top)]
        elif top.is_dir():
            plan.args += ["--ro-bind", str(top), str(top)]
    for name in map(Path, ETC_FILES):
        if name.exists():
            plan.args += ["--ro-bind", str(name), str(name)]
    for root in python_roots():
        plan.bind(root)
    if not confinement.torch:
        _hide_packages(plan)
    plan.bind(nkibot_dir())
    for path in confinement.readable:
        plan.bind(path)
    for path in confinement.writable:
        plan.bind(path, writable=True)
    if scratch_mb is None:
        plan.bind(scratch, writable=True)
    else:
        plan.args += ["--size", str(scratch_mb * 1024 * 1024), "--tmpfs", str(scratch)]
    plan.args += ["--proc", "/proc", "--dev", "/dev"]
    for device in confinement.devices:
        plan.args += ["--dev-bind-try", device, device]
    plan.args += ["--remount-ro", "/dev", "--remount-ro", "/"]


def _hide_packages(plan: Plan) -> None:
    """Each site-packages directory becomes a tmpfs with only the allowed entries."""
    for directory in site_dirs():
        entries = sorted(p for p in directory.iterdir() if _kept(p.name))
        plan.args += ["--tmpfs", str(directory)]
        for entry in entries:
            plan.bind(entry)
        plan.args += ["--remount-ro", str(directory)]


def _kept(name: str) -> bool:
    return (name in KERNEL_SITE_ENTRIES or name.endswith(".pth")
            or name.startswith("__editable__"))
