"""Workspace: safe extraction, user paths kept inside, and the tarball fetched via githubkit."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import pytest

from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.runner.workspace import (
    WorkspaceError,
    extract,
    python_files,
    resolve_inside,
    safe_relative,
    workspace,
)
from tests.fakes.github import GitHubDouble

TOP = "octo-models-abc1234"


def make_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


class TestExtract:
    def test_strips_githubs_top_directory(self, tmp_path: Path) -> None:
        """Files land relative to the repository root, without `<owner>-<repo>-<sha>/`."""
        archive = make_tar(tmp_path / "a.tgz", [(f"{TOP}/src/m.py", b"x = 1\n"),
                                                (f"{TOP}/README.md", b"# hi\n")])
        dest = tmp_path / "ws"
        dest.mkdir()
        extract(archive, dest, 1 << 20)
        assert (dest / "src" / "m.py").read_text() == "x = 1\n"
        assert python_files(dest) == ["src/m.py"]

    @pytest.mark.parametrize(("member", "why"), [
        (link(f"{TOP}/evil", "/etc/passwd"), "is a link"),
        (link(f"{TOP}/hard", f"{TOP}/README.md", tarfile.LNKTYPE), "is a link"),
        ((f"{TOP}/../../escape.py", b"x"), "points outside the archive"),
        (("/abs/path.py", b"x"), "points outside the archive"),
    ], ids=["symlink", "hardlink", "dotdot", "absolute"])
    def test_refuses_dangerous_members(self, tmp_path: Path, member: object, why: str) -> None:
        """Links, `..` and absolute members make the whole archive refused, nothing written."""
        archive = make_tar(tmp_path / "a.tgz", [(f"{TOP}/README.md", b"ok"), member])  # type: ignore[list-item]
        dest = tmp_path / "ws"
        dest.mkdir()
        with pytest.raises(WorkspaceError, match="archive was refused") as info:
            extract(archive, dest, 1 << 20)
        assert why in info.value.message
        assert list(dest.iterdir()) == []

    def test_refuses_tar_bombs(self, tmp_path: Path) -> None:
        """Uncompressed content far beyond the size cap is refused before extraction."""
        archive = make_tar(tmp_path / "a.tgz", [(f"{TOP}/zeros.bin", b"\0" * 200_000)])
        with pytest.raises(WorkspaceError, match="too large"):
            extract(archive, tmp_path, 10_000)


    def test_refuses_archives_of_too_many_entries(self, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """Issue 26, class 4: many empty files (tiny compressed, within every byte cap)
        are refused by count, before anything is written, while reading the headers."""
        from nkibot.runner import workspace

        monkeypatch.setattr(workspace, "MAX_ENTRIES", 500)
        archive = make_tar(tmp_path / "a.tgz", [(f"{TOP}/f{i}.py", b"") for i in range(2000)])
        assert archive.stat().st_size < 20_000
        dest = tmp_path / "ws"
        dest.mkdir()
        with pytest.raises(WorkspaceError, match="more than 500 entries"):
            extract(archive, dest, 1 << 20)
        assert list(dest.iterdir()) == []

    @pytest.mark.slow
    def test_refuses_the_200000_empty_files_at_the_default_cap(self, tmp_path: Path) -> None:
        """The attack as it was sent: 200,000 empty files, under a MiB compressed and
        within every byte cap, are refused by the default entry cap, nothing written."""
        from nkibot.runner.workspace import MAX_ENTRIES

        archive = make_tar(tmp_path / "a.tgz", [(f"{TOP}/f{i}.py", b"") for i in range(200_000)])
        assert archive.stat().st_size < 2 << 20 and MAX_ENTRIES < 200_000
        dest = tmp_path / "ws"
        dest.mkdir()
        with pytest.raises(WorkspaceError, match=f"more than {MAX_ENTRIES} entries"):
            extract(archive, dest, 1 << 30)
        assert list(dest.iterdir()) == []


class TestUserPaths:
    @pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../b.py",
                                      "C:/x.py", ""])
    def test_escaping_paths_are_refused(self, path: str) -> None:
        """Absolute, drive-letter and `..` paths never reach the file system."""
        with pytest.raises(WorkspaceError):
            safe_relative(path)

    def test_links_resolving_outside_are_refused(self, tmp_path: Path) -> None:
        """A path that is inside by name but a symlink out is refused after resolving."""
        root = tmp_path / "repo"
        root.mkdir()
        (root / "out").symlink_to(tmp_path)
        (root / "ok.py").write_text("x")
        assert resolve_inside(root, "ok.py") == (root / "ok.py").resolve()
        with pytest.raises(WorkspaceError, match="outside the repository"):
            resolve_inside(root, "out/secret.py")


class TestFetch:
    def test_downloads_the_repo_at_the_sha(self, github_double: GitHubDouble,
                                           github_settings: Settings) -> None:
        """The tarball at the job's SHA is fetched with githubkit, unpacked, then removed."""
        repo = github_double.add_repo("octo/models", {"src/m.py": "v = 1\n"}, installation_id=3)
        old = repo.refs["heads/main"]
        github_double.commit("octo/models", {"src/m.py": "v = 2\n"})
        gh = installation_client(github_settings, 3)
        seen: dict[str, object] = {}

        async def go() -> None:
            async with workspace(gh, "octo/models", old, max_repo_mb=1) as root:
                seen["text"] = (root / "src" / "m.py").read_text()
                seen["root"] = root
        asyncio.run(go())
        assert seen["text"] == "v = 1\n"
        assert not Path(str(seen["root"])).exists()

    def test_size_cap_stops_the_download(self, github_double: GitHubDouble,
                                         github_settings: Settings) -> None:
        """A tarball over NKIBOT_MAX_REPO_MB is refused with a message naming the cap."""
        import os

        github_double.add_repo("octo/big", {"blob.bin": os.urandom(1_300_000)},
                               installation_id=3)
        sha = github_double.repo("octo/big").refs["heads/main"]
        gh = installation_client(github_settings, 3)

        async def go() -> None:
            async with workspace(gh, "octo/big", sha, max_repo_mb=1):
                raise AssertionError("should not get here")
        with pytest.raises(WorkspaceError, match="larger than 1 MB"):
            asyncio.run(go())
