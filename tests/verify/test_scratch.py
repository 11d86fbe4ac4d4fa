"""A verification's exchange files go to memory when they fit, and the sandbox sees them there."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nkibot.verify import scratch
from nkibot.verify.sandbox import KERNEL, Confinement, run_sandboxed

SHM = scratch.SHARED_MEMORY
on_tmpfs = pytest.mark.skipif(not scratch.is_tmpfs(SHM),
                              reason="this host's /dev/shm is not a tmpfs")


@pytest.fixture
def setting() -> Iterator[None]:
    yield
    scratch.configure("auto")


class TestPlacement:
    def test_a_quarter_of_the_free_space_fits(self) -> None:
        assert scratch.fits(256, 1024)
        assert not scratch.fits(257, 1024)
        assert not scratch.fits(-1, 1024)

    @on_tmpfs
    def test_auto_uses_shared_memory_for_what_fits_and_not_for_more(
            self, setting: None, monkeypatch: pytest.MonkeyPatch) -> None:
        """Available memory bounds a tmpfs (its pages are memory). It is pinned here: read
        live, other tests' processes move it between the test's read and `place`'s."""
        scratch.configure("auto")
        memory = 64 << 20
        assert scratch.shutil.disk_usage(SHM).free > memory
        monkeypatch.setattr(scratch, "available_memory", lambda: memory)
        assert scratch.place(memory // scratch.SHARE) == str(SHM)
        assert scratch.place(memory // scratch.SHARE + 1) is None

    def test_empty_keeps_the_temp_directory(self, setting: None) -> None:
        scratch.configure("")
        assert scratch.place(1) is None

    def test_a_named_directory_is_used_and_a_missing_one_is_not(
            self, setting: None, tmp_path: Path) -> None:
        scratch.configure(str(tmp_path))
        assert scratch.place(1) == str(tmp_path)
        scratch.configure(str(tmp_path / "absent"))
        assert scratch.place(1) is None

    def test_the_mount_table_tells_tmpfs_from_disk(self) -> None:
        assert scratch.is_tmpfs(Path("/proc")) is False
        assert scratch.is_tmpfs(Path("/proc/self")) is False
        mounts = Path("/proc/self/mounts").read_text().split("\n")
        tmpfs_points = [line.split()[1] for line in mounts if " tmpfs " in line]
        assert all(scratch.is_tmpfs(Path(p)) for p in tmpfs_points if Path(p).is_dir())

    def test_auto_without_a_tmpfs_keeps_the_temp_directory(
            self, setting: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A host whose /dev/shm is a plain directory (or absent) writes to disk, as before."""
        monkeypatch.setattr(scratch, "SHARED_MEMORY", tmp_path)
        scratch.configure("auto")
        expected = str(tmp_path) if scratch.is_tmpfs(tmp_path) else None
        assert scratch.place(1) == expected
        monkeypatch.setattr(scratch, "SHARED_MEMORY", tmp_path / "absent")
        assert scratch.place(1) is None

    def test_settings_reach_the_placement(self, setting: None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        from nkibot.config.settings import Settings
        from nkibot.verify.isolation import configure_from

        monkeypatch.setenv("NKIBOT_SCRATCH_DIR", "")
        configure_from(Settings())
        assert scratch.place(1) is None


@on_tmpfs
class TestInMemory:
    def test_the_directory_is_in_memory_behind_a_link_in_the_temp_directory(
            self, setting: None) -> None:
        scratch.configure("auto")
        with scratch.temporary("nkibot-verify-", 1 << 20) as tmp:
            assert tmp.parent == Path(tempfile.gettempdir()) and tmp.is_symlink()
            real = tmp.resolve()
            assert real.parent == SHM and tmp.name.startswith("nkibot-verify-")
            (tmp / "first").mkdir()
        assert not tmp.exists() and not tmp.is_symlink() and not real.exists()

    def test_what_does_not_fit_stays_in_the_temp_directory(self, setting: None) -> None:
        scratch.configure("auto")
        with scratch.temporary("nkibot-verify-", 1 << 62) as tmp:
            assert not tmp.is_symlink() and tmp.parent == Path(tempfile.gettempdir())
        assert not tmp.exists()

    def test_a_kernel_child_sees_its_directory_where_it_always_was(
            self, setting: None) -> None:
        """The sandbox binds the directory at the link's path: the child writes under the
        temp directory's name, the bytes land in memory, and neither the host's /dev/shm
        nor a writable /dev is in its view."""
        scratch.configure("auto")
        with scratch.temporary("nkibot-verify-", 1 << 20) as tmp, \
                tempfile.NamedTemporaryFile(dir=SHM, prefix="host-secret-") as other:
            out = tmp / "first"
            out.mkdir()
            code = ("import os, sys\n"
                    "open(os.path.join(sys.argv[1], 'out.bin'), 'wb').write(b'x' * 4096)\n"
                    "print(os.path.realpath(sys.argv[1]))\n"
                    "print(sorted(os.listdir('/dev/shm')))\n"
                    "try:\n    open('/dev/planted', 'w')\nexcept OSError as e:\n"
                    "    print('dev', e.errno)\n")
            got = run_sandboxed([sys.executable, "-I", "-c", code, str(out)], timeout_s=30,
                                confinement=Confinement(writable=(out,), torch=KERNEL.torch))
            assert got.ok, got.stderr[-800:]
            assert (tmp.resolve() / "first" / "out.bin").stat().st_size == 4096
            seen = got.stdout.decode().split("\n")
            assert seen[0] == str(out) and seen[1] == "[]", seen
            assert Path(other.name).name not in got.stdout.decode()
            assert seen[2].startswith("dev 30")  # EROFS
