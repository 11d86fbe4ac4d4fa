"""Degraded hosts: isolation is reported as reduced, with what is missing, everywhere.

These run the real degraded paths: bubblewrap turned off by settings, and a bubblewrap
that cannot build namespaces (a stand-in binary that fails, as on a host whose user
namespaces are disabled)."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nkibot.backends.sim import SimBackend
from nkibot.cli import app
from nkibot.task import InputSpec, Task
from nkibot.verify import isolation
from nkibot.verify.reference import compute_reference
from nkibot.verify.sandbox import run_sandboxed
from tests.verify.front_door import checked

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


@pytest.fixture(autouse=True)
def restore_policy() -> Iterator[None]:
    before = isolation.policy()
    yield
    isolation.configure(before)


def _degrade(**fields: object) -> isolation.Isolation:
    isolation.configure(dataclasses.replace(isolation.SandboxPolicy(), **fields))  # type: ignore[arg-type]
    return isolation.current()


def test_bubblewrap_turned_off_is_reduced_and_says_so() -> None:
    found = _degrade(bwrap=None)
    assert found.level == "reduced"
    assert found.missing[0] == "bubblewrap (disabled by settings)"
    out = run_sandboxed([sys.executable, "-I", "-c", "print('ran')"], timeout_s=30)
    assert out.ok and out.stdout.strip() == b"ran"
    assert out.isolation[:2] == ["isolation: reduced", "missing: bubblewrap (disabled by settings)"]
    assert "seccomp" not in out.isolation and "uid" not in out.isolation


def test_namespaces_unavailable_is_reduced() -> None:
    """A bubblewrap that cannot set up its namespaces fails the probe: reduced, named."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o755)  # the probe runs it as the sandbox uid
        found = _probe_with_fake(Path(tmp) / "bwrap")
    assert found.level == "reduced"
    assert any(m.startswith("namespaces (bwrap: No permissions") for m in found.missing)
    assert any("unprivileged_userns_clone" in f for f in found.fixes)


def _probe_with_fake(fake: Path) -> isolation.Isolation:
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    return _degrade(bwrap=str(fake))


def test_refusal_unless_allowed() -> None:
    found = _degrade(bwrap=None)
    why = isolation.refusal(found, allow_reduced=False)
    assert why is not None and "NKIBOT_ALLOW_REDUCED_ISOLATION=1" in why
    assert isolation.refusal(found, allow_reduced=True) is None
    assert isolation.refusal(isolation.Isolation("full"), allow_reduced=False) is None


def test_runner_refuses_to_start_under_reduced_isolation(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NKIBOT_SANDBOX_BWRAP", "")
    monkeypatch.setenv("NKIBOT_QUEUE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    result = CliRunner().invoke(app, ["runner", "--exit-when-idle"])
    assert result.exit_code == 3
    assert "refusing untrusted jobs" in result.output
    assert not (tmp_path / "q.db").exists()  # no job was even looked at


def test_honest_kernel_still_verifies_with_reduced_isolation() -> None:
    """The verdict does not depend on the sandbox level; the result records the level."""
    _degrade(bwrap=None)
    path = KERNELS / "relu_ref.py"
    task = Task.model_validate({
        "reference_source": path.read_text(), "entry_point": "Model", "source_path": "r.py",
        "reference_file": str(path), "has_get_inputs": True, "seeds": [0],
        "inputs": [InputSpec(name="x", shape=(256, 64))]})
    with compute_reference(task) as ref:
        assert ref.isolation[0] == "isolation: reduced"
        result = checked(SimBackend(), (KERNELS / "relu_ok.py").read_text(), task, ref)
    assert result.passed, result.reasons
    assert result.isolation[:2] == ["isolation: reduced",
                                    "missing: bubblewrap (disabled by settings)"]
