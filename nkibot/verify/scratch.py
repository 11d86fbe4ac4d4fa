"""Where a verification's exchange files go: memory when they fit, else the temp directory.

A kernel child writes every trial's outputs and its inputs as it left them, and the parent
reads them all back (`trials`). On a disk-backed temp directory those gigabytes go
through the page cache to the disk, and once the dirty pages pass the kernel's threshold
every write waits for writeback: on this project's reference VM, 80 MB/s, so a level-1
task's 640 MB took 6-8 s to write where a tmpfs took 0.4 s (bench/time_to_verdict.py
has the per-stage figures). Cloud runners on network block storage throttle alike.

So a verification whose files fit puts them in a RAM-backed directory (`Settings.scratch_dir`,
NKIBOT_SCRATCH_DIR):
- "auto" (the default): /dev/shm when it is a tmpfs this process can write;
- a path: that directory (any filesystem: an operator's own tmpfs, or a fast disk);
- "" (empty): always the temp directory, as before.

"Fit" is decided per verification from what its children write when the kernel passes
(`trials.exchange_bytes`): all of it must take at most a quarter of what the directory has
free and, on a tmpfs, of the host's available memory, since tmpfs pages are memory. A
child's own write limit is the smaller of `trials.write_limit` (8 bytes an element) and a
quarter of the free space where it writes (`sandbox.write_limit`), so a passing kernel
never meets it here. Anything larger goes to the temp directory, on disk.

A directory in memory is reached through a link in the temp directory with the name it
would have had there, and that name is the only one the parent hands on: requests, the
sandbox's binds (bubblewrap follows the link on the host side and mounts it at the link's
path), logs. So a child sees its directory where it always did, /dev stays the fresh one
the sandbox makes, and nothing of the host's /dev/shm is in any child's view.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: The directory "auto" uses when it is a tmpfs.
SHARED_MEMORY = Path("/dev/shm")  # noqa: S108 - only mkdtemp (0700, a fresh name) writes there
#: The share of the free space (and of available memory) one verification may take.
SHARE = 4

_setting = "auto"


def configure(setting: str) -> None:
    """Set the process-wide choice (`Settings.scratch_dir`; `isolation.configure_from`
    calls this at the edges: `nkibot convert`, `nkibot verify`, the runner, doctor).
    Elsewhere the default, "auto", holds."""
    global _setting
    _setting = setting


@contextlib.contextmanager
def temporary(prefix: str, nbytes: int) -> Iterator[Path]:
    """A temporary directory for files of at most `nbytes` in all, removed on exit: in
    memory when they fit (`place`), reached through a link in the temp directory; else a
    plain one there."""
    root = place(nbytes)
    if root is not None:
        real = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        link = _link(real, prefix)
        if link is not None:
            try:
                yield link
            finally:
                link.unlink(missing_ok=True)
                shutil.rmtree(real, ignore_errors=True)
            return
        shutil.rmtree(real, ignore_errors=True)  # no link could be made: the temp directory
    with tempfile.TemporaryDirectory(prefix=prefix) as plain:
        yield Path(plain)


def _link(real: Path, prefix: str) -> Path | None:
    """A new symlink to `real` in the temp directory (never one that was there: symlink()
    does not replace), or None."""
    for _ in range(16):
        link = Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(6)}"
        try:
            link.symlink_to(real)
        except FileExistsError:
            continue
        except OSError:
            return None
        return link
    return None


def place(nbytes: int) -> str | None:
    """The directory to make a temporary directory in, for files of at most `nbytes` in
    all; None: the temp directory (`tempfile`'s default)."""
    found = _root(_setting)
    if found is None:
        return None
    root, tmpfs = found
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return None
    limit = min(free, available_memory()) if tmpfs else free
    return str(root) if fits(nbytes, limit) else None


def fits(nbytes: int, free: int) -> bool:
    """Whether files of `nbytes` may go where `free` bytes are left."""
    return 0 <= nbytes <= free // SHARE


def _root(setting: str) -> tuple[Path, bool] | None:
    """The directory the setting names, and whether it is a tmpfs (the mount table read
    once); None when there is none to use."""
    if not setting:
        return None
    root = SHARED_MEMORY if setting == "auto" else Path(setting)
    tmpfs = is_tmpfs(root)
    if setting == "auto" and not tmpfs:
        return None
    return (root, tmpfs) if root.is_dir() and os.access(root, os.W_OK | os.X_OK) else None


def is_tmpfs(path: Path) -> bool:
    """Whether `path` is on a tmpfs (the mount table's longest prefix of it says so)."""
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    target, best, kind = str(path.resolve()), -1, ""
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # the later of two mounts on one point is seen
            best, kind = len(point), fields[2]
    return kind == "tmpfs"


def available_memory() -> int:
    """MemAvailable in bytes (0 when it cannot be read: nothing goes to memory then)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
