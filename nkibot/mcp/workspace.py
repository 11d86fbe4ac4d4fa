"""The MCP server's view of the files it may touch: one workspace root, nothing outside it.

An IDE agent names files relative to the workspace (or absolute paths inside it). Every
path is resolved, symlinks included, before it is used, so `..`, absolute paths elsewhere
and links that leave the root are refused with an error that says where the root is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
