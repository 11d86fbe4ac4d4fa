"""The repository at the job's SHA, in a temporary directory that is removed afterwards.

The tarball comes through githubkit (streamed, stopped at the size cap) and is checked
before anything is written: links, absolute paths, `..` members, special files and more
than `MAX_ENTRIES` entries make the whole archive refused. Extraction uses tarfile's
`data` filter as a second guard. Paths from users are resolved inside the workspace or
refused.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from nkibot.convert.discovery import TargetError

CHUNK = 1 << 16
#: Uncompressed size allowed per compressed byte of cap (guards against tar bombs).
EXPANSION = 8
#: Entries (files and directories) an archive may hold. 200,000 empty files compress to
#: under 1 MiB, far inside the byte caps, and cost an inode, a TarInfo and a syscall each.
MAX_ENTRIES = 50_000


class WorkspaceError(TargetError):
    """The repository could not be fetched or unpacked safely; the message says why."""


def safe_relative(path: str) -> PurePosixPath:
    """A user path as a relative POSIX path, or WorkspaceError for absolute/`..` paths."""
    if not path or path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise WorkspaceError(f"`{path}` is not a path inside the repository",
                             "use a path relative to the repository root, e.g. src/model.py")
    rel = PurePosixPath(path.replace("\\", "/"))
    if any(part == ".." for part in rel.parts):
        raise WorkspaceError(f"`{path}` leaves the repository (`..` is not allowed)",
                             "use a path relative to the repository root, e.g. src/model.py")
    return rel


def resolve_inside(root: Path, path: str) -> Path:
    """`root/path` with links resolved, refused if it ends up outside `root`."""
    full = (root / safe_relative(path)).resolve()
    if not full.is_relative_to(root.resolve()):
        raise WorkspaceError(f"`{path}` resolves outside the repository")
    return full


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if member.issym() or member.islnk():
        return f"`{name}` is a link (to `{member.linkname}`)"
    if not (member.isfile() or member.isdir()) and member.type != tarfile.XGLTYPE:
        return f"`{name}` is not a regular file or directory"
    if name.startswith("/") or any(p == ".." for p in PurePosixPath(name).parts):
        return f"`{name}` points outside the archive"
    return None


def checked_members(tar: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    """Members with GitHub's top-level `<owner>-<repo>-<sha>/` stripped, or WorkspaceError."""
    out: list[tarfile.TarInfo] = []
    total = 0
    prefix: str | None = None
    for count, member in enumerate(tar, 1):  # streamed: refused at the cap, not after
        if count > MAX_ENTRIES:
            raise WorkspaceError(f"the repository archive has more than {MAX_ENTRIES} "
                                 "entries", "nkibot unpacks repositories of at most that "
                                 "many files and directories")
        if member.type in (tarfile.XGLTYPE, tarfile.XHDTYPE):
            continue  # pax headers (GitHub stores the commit id in one)
        problem = _member_problem(member)
        if problem is not None:
            raise WorkspaceError(f"the repository archive was refused: {problem}",
                                 "nkibot does not unpack archives with links or escaping "
                                 "paths; remove them from the repository")
        top, _, rest = member.name.strip("/").partition("/")
        prefix = top if prefix is None else prefix
        if top != prefix:
            raise WorkspaceError("the repository archive has more than one top-level directory")
        total += member.size
        if total > max_bytes * EXPANSION:
            raise WorkspaceError("the repository is too large to unpack",
                                 "raise NKIBOT_MAX_REPO_MB on the runner")
        if rest:
            out.append(member.replace(name=rest, deep=False))
    return out


def extract(archive: Path, dest: Path, max_bytes: int) -> None:
    """Unpack a GitHub tarball into `dest` after checking every member."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = checked_members(tar, max_bytes)
            tar.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise WorkspaceError(f"the repository archive could not be read: {exc}") from exc


async def download(gh: Any, repo: str, sha: str, dest: Path, max_bytes: int) -> int:
    """Stream the tarball at `sha` to `dest`, stopping at `max_bytes`; returns its size."""
    owner, name = repo.split("/", 1)
    size = 0
    async with gh:  # keeps githubkit's HTTP client open while the body streams
        resp = await gh.rest.repos.async_download_tarball_archive(owner, name, sha, stream=True)
        raw = resp.raw_response
        try:
            with dest.open("wb") as fh:
                async for chunk in raw.aiter_bytes(CHUNK):
                    size += len(chunk)
                    if size > max_bytes:
                        raise WorkspaceError(
                            f"the repository archive is larger than {max_bytes >> 20} MB",
                            "raise NKIBOT_MAX_REPO_MB on the runner, or convert from a "
                            "smaller repository")
                    fh.write(chunk)
        finally:
            await raw.aclose()
    return size


@asynccontextmanager
async def workspace(gh: Any, repo: str, sha: str, *, max_repo_mb: int
                    ) -> AsyncIterator[Path]:
    """The repository unpacked at `sha` in a temporary directory, removed on exit."""
    import asyncio

    tmp = Path(tempfile.mkdtemp(prefix="nkibot-ws-"))
    try:
        archive = tmp / "repo.tar.gz"
        root = tmp / "repo"
        root.mkdir()
        max_bytes = max_repo_mb << 20
        await download(gh, repo, sha, archive, max_bytes)
        await asyncio.to_thread(extract, archive, root, max_bytes)
        archive.unlink()
        yield root
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def python_files(root: Path, limit: int = 5000) -> list[str]:
    """Repository-relative `.py` paths (for "did you mean" on a missing file)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if not path.is_symlink():
            found.append(path.relative_to(root).as_posix())
        if len(found) >= limit:
            break
    return found
