"""`nkibot sim run KERNEL.py::function --inputs a.npy b.npy --out out.npy`."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from nkibot.cli import app

KERNEL = textwrap.dedent("""
    import nki
    import nki.language as nl


    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
        return out


    @nki.jit
    def broken(a, b):
        return nl.load(a[0:256, :])
""")


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.full((128, 8), 1.5, np.float32))
    np.save(b, np.full((128, 8), 2.0, np.float32))
    return kernel, a, b


class TestSimCli:
    def test_run_saves_result_and_prints_stats(self, tmp_path: Path) -> None:
        """`sim run` loads the inputs, runs the kernel and writes the output .npy."""
        kernel, a, b = _files(tmp_path)
        out = tmp_path / "out.npy"
        result = CliRunner().invoke(app, ["sim", "run", f"{kernel}::add", "--inputs", str(a),
                                          str(b), "--out", str(out)])
        assert result.exit_code == 0, result.output
        np.testing.assert_array_equal(np.load(out), np.full((128, 8), 3.5, np.float32))
        stats = json.loads(result.output.strip().splitlines()[-1])
        assert stats["instructions"]["dma"] == 3
        assert "nki" not in sys.modules

    def test_run_reports_rule_and_line(self, tmp_path: Path) -> None:
        """A broken kernel exits 1 with the rule id and kernel.py:line on stderr."""
        kernel, a, b = _files(tmp_path)
        result = CliRunner().invoke(app, ["sim", "run", f"{kernel}::broken", "--inputs",
                                          str(a), str(b)])
        assert result.exit_code == 1
        assert "[out-of-bounds]" in result.output
        line = KERNEL.splitlines().index("    return nl.load(a[0:256, :])") + 1
        assert f"kernel.py:{line}" in result.output
