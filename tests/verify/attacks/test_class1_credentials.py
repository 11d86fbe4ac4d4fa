"""Class 1: credential theft and publication (the parent's environment and key file,
secrets written outside the sandbox)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet
from tests.verify.attacks.conftest import PROBE, RELU, findings, verify

SECRET = "ghs_FAKEAPPSECRET0123456789abcdef"


def test_parent_environment_is_out_of_reach(
        relu_task: Task, relu_ref: ReferenceSet, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the child's environment nor any /proc/*/environ holds the parent's secrets,
    and the host's /proc (the runner's pid) is not there at all."""
    monkeypatch.setenv("NKIBOT_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    attack = PROBE + f'''
import os
attempt("env", lambda: [k for k, v in os.environ.items() if "{SECRET}" in v] or 1 / 0)
def scan():
    hits = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if b"{SECRET}" in open(f"/proc/{{pid}}/environ", "rb").read():
                    hits.append(pid)
            except OSError:
                pass
    return hits or 1 / 0
attempt("proc", scan)
attempt("host_pid", lambda: open("/proc/{os.getpid()}/environ", "rb").read())
attempt("pids", lambda: 1 / 0 if len([p for p in os.listdir("/proc") if p.isdigit()]) < 4
        else "many")
report()
''' + RELU
    found = findings(verify(attack, relu_task, relu_ref))
    assert found == {"env": "refused: ZeroDivisionError", "proc": "refused: ZeroDivisionError",
                     "host_pid": "refused: FileNotFoundError",
                     "pids": "refused: ZeroDivisionError"}, found


def test_secrets_files_are_unreadable(relu_task: Task, relu_ref: ReferenceSet,
                                      tmp_path: Path) -> None:
    """A root-only secrets file is unreadable even where it is in the child's view (the
    inputs directory): the child is another uid. Elsewhere it is not in the view."""
    planted = relu_ref.root / "inputs" / "secrets.env"
    planted.write_text(f"NKIBOT_PRIVATE_KEY={SECRET}\n")
    planted.chmod(0o600)
    hidden = tmp_path / "secrets.env"
    hidden.write_text(SECRET)
    hidden.chmod(0o600)
    try:
        attack = PROBE + f'''
import os
attempt("stat", lambda: os.stat("{planted}").st_size)
attempt("in_view", lambda: open("{planted}").read())
attempt("elsewhere", lambda: open("{hidden}").read())
attempt("run", lambda: open("/run/nkibot/secrets.env").read())
attempt("uid", lambda: os.getuid() or 1 / 0)
report()
''' + RELU
        found = findings(verify(attack, relu_task, relu_ref))
    finally:
        planted.unlink()
    assert found["stat"].startswith("ok: ")  # it is in view...
    assert found["in_view"] == "refused: PermissionError"  # ...and still unreadable
    assert found["elsewhere"] == "refused: FileNotFoundError"
    assert found["run"] == "refused: FileNotFoundError"
    assert found["uid"] == "ok: 65534"


def test_nothing_written_outside_the_scratch(relu_task: Task, relu_ref: ReferenceSet,
                                             tmp_path: Path) -> None:
    """Writes to the host's /tmp, the inputs, a host directory and nkibot itself all fail;
    the private scratch directory (cwd) works, so the probe itself is sound."""
    import nkibot

    package = Path(nkibot.__file__).parent
    attack = PROBE + f'''
import os
def write(path):
    with open(path, "w") as handle:
        handle.write("{SECRET}")
    return path
attempt("scratch", lambda: write("leak.txt"))
attempt("tmp", lambda: write("/tmp/nkibot-leak.txt"))
attempt("inputs", lambda: write("{relu_ref.root / 'inputs' / 'leak.txt'}"))
attempt("host", lambda: write("{tmp_path / 'leak.txt'}"))
attempt("nkibot", lambda: write("{package / 'leak.py'}"))
report()
''' + RELU
    found = findings(verify(attack, relu_task, relu_ref))
    assert found["scratch"] == "ok: leak.txt"
    assert all(found[k].startswith("refused: ") for k in ("tmp", "inputs", "host", "nkibot"))
    for path in (Path("/tmp/nkibot-leak.txt"), relu_ref.root / "inputs" / "leak.txt",
                 tmp_path / "leak.txt", package / "leak.py"):
        assert not path.exists()
    assert not any(SECRET in p.read_text(errors="ignore") for p in Path("/tmp").glob(
        "nkibot-sbx-*/leak.txt")), "the scratch directory outlived its run"
    assert os.path.isdir(relu_ref.root / "inputs")
