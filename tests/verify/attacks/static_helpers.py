"""Shared by the static-rule attack tests: run a kernel through the rules and `nkibot verify`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from nkibot.cli import app
from nkibot.verify.guards import static_check

ROOT = Path(__file__).resolve().parents[3]
TARGET = f"{ROOT / 'tests' / 'fixtures' / 'kernels' / 'relu_ref.py'}::Model"
HEADER = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\nimport numpy as np\n\n\n"


def kernel(body: str, header: str = HEADER) -> str:
    """A relu-shaped kernel file: the header, then `body` (which defines relu_kernel)."""
    return header + body.strip() + "\n"


def assert_refused(src: str, reason: str, tmp_path: Path) -> None:
    """The rules name `reason`, and the real verify path refuses the kernel for it."""
    reasons = static_check(src)
    assert any(r.startswith(reason) for r in reasons), reasons
    path = tmp_path / "attack_kernel.py"
    path.write_text(src, encoding="utf-8")
    result = CliRunner().invoke(app, ["verify", TARGET, "--kernel", str(path), "--json",
                                      "--trials", "1"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "failed" and out["compile"]["compiler"] == "nkibot static check"
    assert any(str(r).startswith(reason) for r in out["reasons"]), out["reasons"]
    lines = [d["line"] for d in out["compile"]["diagnostics"] if d["rule"] == reason.split()[0]]
    assert lines and all(isinstance(n, int) and n > 0 for n in lines)
