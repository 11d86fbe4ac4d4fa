"""Issue 26, class 3: the MCP server writes only under its root, following no link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nkibot.mcp.workspace import ToolInputError, Workspace


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Workspace, Path]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("precious")
    return Workspace.at(tmp_path / "ws"), tmp_path / "outside"


class TestWrite:
    def test_nested_write_creates_folders(self, roots: tuple[Workspace, Path]) -> None:
        ws, _ = roots
        path = ws.write("out/deep", "k.py", b"x = 1\n")
        assert path == ws.root / "out" / "deep" / "k.py" and path.read_bytes() == b"x = 1\n"
        assert ws.write(str(ws.root / "out"), "k.py", b"2").read_bytes() == b"2"

    def test_planted_directory_link_is_not_followed(self, roots: tuple[Workspace, Path]
                                                    ) -> None:
        """`out -> ../outside`: the write is refused, nothing lands outside."""
        ws, outside = roots
        (ws.root / "out").symlink_to(outside)
        with pytest.raises(ToolInputError, match="follows no link"):
            ws.write("out", "victim.txt", b"overwritten")
        with pytest.raises(ToolInputError, match="follows no link"):
            ws.write("out/sub", "new.txt", b"x")
        assert (outside / "victim.txt").read_text() == "precious"
        assert sorted(os.listdir(outside)) == ["victim.txt"]

    def test_planted_file_link_and_hard_link_are_not_written(
            self, roots: tuple[Workspace, Path]) -> None:
        ws, outside = roots
        (ws.root / "out").mkdir()
        (ws.root / "out" / "report.md").symlink_to(outside / "victim.txt")
        os.link(outside / "victim.txt", ws.root / "out" / "hard.md")
        for name in ("report.md", "hard.md"):
            with pytest.raises(ToolInputError, match="cannot write"):
                ws.write("out", name, b"overwritten")
        assert (outside / "victim.txt").read_text() == "precious"

    def test_paths_leaving_the_root_are_refused(self, roots: tuple[Workspace, Path]) -> None:
        ws, outside = roots
        for folder in ("../outside", str(outside), "a/../../outside"):
            with pytest.raises(ToolInputError, match="outside the workspace"):
                ws.write(folder, "x.txt", b"x")
        with pytest.raises(ToolInputError, match="empty"):
            ws.write(".", "", b"x")
        assert sorted(os.listdir(outside)) == ["victim.txt"]
