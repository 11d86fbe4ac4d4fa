"""Issue 26, class 3: `simulate(shapes=...)` builds its random inputs in the sandboxed
child, after the size budget is checked here; the server allocates nothing of their size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nkibot.verify.protocol as protocol
from nkibot.config.settings import Settings
from nkibot.mcp.tools import MAX_INPUT_BYTES, Tools
from nkibot.mcp.workspace import ToolInputError, Workspace

RELU = (Path(__file__).resolve().parents[1] / "fixtures" / "kernels" / "relu_ok.py").read_text()


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    return Tools(workspace=Workspace.at(tmp_path), settings=Settings())


def test_random_inputs_are_made_in_the_child_not_the_server(
        tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own random_array is poisoned: simulate still answers (the child,
    a fresh process, made the inputs), with the same seeded values as before."""
    expected = np.maximum(protocol.random_array([256, 64], "float32",
                                                np.random.default_rng(7)), 0)

    def poisoned(*args: object, **kwargs: object) -> None:
        raise AssertionError("random inputs were built in the server process")

    monkeypatch.setattr(protocol, "random_array", poisoned)
    result = tools.simulate(RELU, shapes=["x=256x64xfloat32"], seed=7, out_dir="out")
    assert result["ok"], result
    written = np.load(tools.workspace.root / "out" / "output0.npy")
    np.testing.assert_array_equal(written, expected)


def test_oversized_shapes_are_refused_before_anything_runs(tools: Tools) -> None:
    """40000x40000 float32 (6 GB): refused by the budget, with what to do."""
    with pytest.raises(ToolInputError, match=r"6104 MiB.*use smaller shapes"):
        tools.simulate(RELU, shapes=["x=40000x40000xfloat32"])


def test_oversized_input_files_are_refused_before_loading(tools: Tools) -> None:
    """A .npy input over the budget is refused by its size on disk, not loaded."""
    big = tools.workspace.root / "big.npy"
    with big.open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk, no memory
    with pytest.raises(ToolInputError, match="more than 512 MiB; use smaller inputs"):
        tools.simulate(RELU, inputs=["big.npy"])
