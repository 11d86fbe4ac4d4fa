"""The MCP server's view of the files it may touch: one workspace root, nothing outside it.

An IDE agent names files relative to the workspace (or absolute paths inside it). Every
path read is resolved, symlinks included, before it is used, so `..`, absolute paths
elsewhere and links that leave the root are refused with an error that says where the
root is. Every path written (`write`) is walked component by component from a descriptor
of the root, with `O_NOFOLLOW` at each step: no symlink is followed anywhere, a planted
link is refused rather than resolved (so a link swapped in after a check cannot
redirect the write), and a file with other hard links is not overwritten.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


class ToolInputError(ValueError):
    """A tool argument that cannot be used: the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def at(cls, root: Path) -> Workspace:
        resolved = root.expanduser().resolve()
        if not resolved.is_dir():
            raise ToolInputError(f"workspace root {root} is not a directory")
        return cls(resolved)

    def resolve(self, path: str, *, what: str = "path", must_exist: bool = True) -> Path:
        """`path` resolved inside the root; refused when it leaves it or does not exist."""
        if not path or not path.strip() or "\x00" in path:
            raise ToolInputError(f"{what} is empty; give a path inside {self.root}")
        resolved = (self.root / path).expanduser().resolve()
        if not resolved.is_relative_to(self.root):
            raise ToolInputError(f"{what} {path!r} is outside the workspace {self.root}; "
                                 "give a path inside it")
        if must_exist and not resolved.exists():
            raise ToolInputError(f"{what} {path!r} does not exist under {self.root}")
        return resolved

    def target(self, target: str) -> tuple[Path, str]:
        """`FILE::Name` -> (the file, resolved inside the root, and the name)."""
        path, sep, name = target.rpartition("::")
        if not sep or not path or not name.isidentifier():
            raise ToolInputError(f"target {target!r} is not FILE::Name, "
                                 "e.g. examples/rmsnorm.py::RMSNorm")
        file = self.resolve(path, what="target file")
        if not file.is_file():
            raise ToolInputError(f"target file {path!r} is a directory, not a Python file")
        return file, name

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def parts(self, path: str, *, what: str = "path") -> tuple[str, ...]:
        """`path` as components under the root, without resolving anything: refused when
        empty, when it names `..` or `.`, or when it is absolute and not under the root."""
        if not path or not path.strip() or "\x00" in path:
            raise ToolInputError(f"{what} is empty; give a path inside {self.root}")
        given = PurePosixPath(Path(path).expanduser().as_posix())
        if given.is_absolute():
            if not Path(given).is_relative_to(self.root):
                raise ToolInputError(f"{what} {path!r} is outside the workspace {self.root}; "
                                     "give a path inside it")
            given = PurePosixPath(Path(given).relative_to(self.root).as_posix())
        parts = tuple(p for p in given.parts if p != ".")
        if ".." in parts:
            raise ToolInputError(f"{what} {path!r} may not contain `..`: paths outside the "
                                 f"workspace {self.root} are refused")
        return parts

    def write(self, folder: str, name: str | Path, data: bytes, *,
              what: str = "out_dir") -> Path:
        """Write `data` to `folder`/`name` under the root, creating folders, following no
        link (see the module docstring); the path written, or ToolInputError saying why."""
        parts = self.parts(folder, what=what) + self.parts(str(name), what="file name")
        if not parts:
            raise ToolInputError(f"{what} {folder!r} names the workspace root, not a file")
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts[:-1]:
                inner = _enter(fd, part)
                os.close(fd)
                fd = inner
            _write_at(fd, parts[-1], data)
        except OSError as exc:
            raise ToolInputError(
                f"cannot write {'/'.join(parts)} under {self.root}: {exc.strerror or exc} "
                "(a component is a symlink, not a directory, or a hard-linked file; "
                "nkibot follows no link when it writes)") from exc
        finally:
            os.close(fd)
        return self.root.joinpath(*parts)


def _enter(fd: int, part: str) -> int:
    """The directory `part` inside `fd` (made if absent), never through a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(part, 0o755, dir_fd=fd)
    return os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)


def _write_at(fd: int, name: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    out = os.open(name, flags, 0o644, dir_fd=fd)
    try:
        info = os.fstat(out)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise OSError(0, "not a regular file with a single link")
        os.ftruncate(out, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    finally:
        os.close(out)
