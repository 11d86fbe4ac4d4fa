"""The codebase passes its own linters: ruff everywhere, mypy --strict on nkibot/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class TestQuality:
    def test_ruff_is_clean(self) -> None:
        """ruff reports no findings on the package, tests and benchmarks."""
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "nkibot", "tests", "bench", "infra"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_mypy_strict_is_clean(self) -> None:
        """mypy --strict (configured in pyproject) reports no errors on nkibot/."""
        proc = subprocess.run(
            [sys.executable, "-m", "mypy"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
