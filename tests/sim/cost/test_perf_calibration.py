"""bench/perf_calibration.py on a folder of our own: JSON lines, chain order, exit code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent
BENCH = load_module(HERE.parents[2] / "bench" / "perf_calibration.py", "perf_calibration")


def _point(pid: str, fn: str, measured: float, order: int, chain: str = "c") -> dict[str, object]:
    return {"id": pid, "kernel_file": "kernels/k.py", "function": fn, "target": "trn1",
            "inputs": [{"name": "a", "shape": [128, 128], "dtype": "bfloat16"},
                       {"name": "b", "shape": [128, 512], "dtype": "bfloat16"}],
            "kwargs": {}, "measured_us": measured, "chain": chain, "order": order}


def _folder(tmp_path: Path, points: list[dict[str, object]]) -> Path:
    (tmp_path / "kernels").mkdir()
    shutil.copy(HERE / "kernels.py", tmp_path / "kernels" / "k.py")
    (tmp_path / "points.json").write_text(json.dumps(points))
    return tmp_path


def test_json_lines_and_exit_zero_when_the_bar_holds(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pred = BENCH.predict(_folder(tmp_path, []), _point("x", "matmuls", 1.0, 1))[0]
    assert pred is not None
    folder = tmp_path
    (folder / "points.json").write_text(json.dumps([_point("p1", "matmuls", pred * 1.3, 1)]))
    assert BENCH.main([str(folder), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["id"] == "p1" and lines[0]["ratio"] == pytest.approx(1 / 1.3, rel=1e-2)
    assert lines[-1]["points"] == 1 and lines[-1]["within_2x"] == 1
    assert lines[-1]["chains_in_order"] == lines[-1]["chains"] == 1


def test_a_point_off_by_2x_or_not_runnable_fails(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, [_point("far", "matmuls", 1e6, 1),
                                _point("bad", "no_such_function", 5.0, 2)])
    assert BENCH.main([str(folder), "--json"]) == 1
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[1]["predicted_us"] is None and "no_such_function" in lines[1]["not_runnable"]
    assert lines[-1]["within_2x"] == 0 and lines[-1]["not_runnable"] == 1


def test_chain_order_with_ties() -> None:
    rows = [{"measured_us": 100.0, "predicted_us": 50.0},
            {"measured_us": 97.0, "predicted_us": 60.0},  # a 3% difference is a tie
            {"measured_us": 50.0, "predicted_us": 30.0}]
    assert BENCH.chain_in_order(rows)
    rows[2]["predicted_us"] = 70.0  # now predicted slower than the 100 us point
    assert not BENCH.chain_in_order(rows)


def test_clear_pairs_count_only_pairs_measured_over_1_5x_apart() -> None:
    rows = [{"id": "a", "measured_us": 100.0, "predicted_us": 80.0},
            {"id": "b", "measured_us": 90.0, "predicted_us": 95.0},  # 1.11x from a: not counted
            {"id": "c", "measured_us": 60.0, "predicted_us": 70.0}]  # 1.67x from a, 1.5x from b
    assert BENCH.clear_pairs(rows) == (1, 1, [])
    rows[2]["predicted_us"] = 85.0  # now ranked slower than a
    assert BENCH.clear_pairs(rows) == (1, 0, ["a vs c"])


def test_a_folder_without_points_is_a_clear_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCH.main([str(tmp_path)]) == 2
    assert "no points.json" in capsys.readouterr().err


SOURCES = load_module(HERE.parents[2] / "bench" / "perf_calibration_sources.py",
                      "perf_calibration_sources")
_RST = """Title
=====

.. code-block:: python

    def helper():
        return 1

Text between.

  .. code-block:: python

      import nki
      import nki.language as nl

      @nki.jit
      def kern(a, b):
          \"\"\"first version\"\"\"
          return KERNEL_BODY

.. code-block:: python

   @nki.jit
   def kern(a, b):
       \"\"\"second version\"\"\"
       pass
"""


def test_code_blocks_are_extracted_by_ordinal_and_checked() -> None:
    blocks = SOURCES.python_blocks(_RST)
    assert len(blocks) == 3 and blocks[0].startswith("def helper():")
    first = SOURCES.extract(_RST, "kern", 1, "first version")
    assert first.startswith("import nki\n") and "def kern(a, b):" in first
    assert "second version" in SOURCES.extract(_RST, "kern", 2)
    with pytest.raises(SOURCES.SourceError, match="no longer contains"):
        SOURCES.extract(_RST, "kern", 2, "first version")
    with pytest.raises(SOURCES.SourceError, match="2 code blocks define kern"):
        SOURCES.extract(_RST, "kern", 3)


def test_an_sdk_point_runs_from_the_checkout_and_needs_it(tmp_path: Path) -> None:
    sdk = tmp_path / "sdk"
    (sdk / "guide").mkdir(parents=True)
    body = (HERE / "kernels.py").read_text()
    (sdk / "guide" / "page.rst").write_text(
        "Intro\n\n.. code-block:: python\n\n" + "".join(f"    {line}\n" if line else "\n"
                                                      for line in body.splitlines()))
    point = _point("sdk-point", "matmuls", 1.0, 1)
    point.update({"kernel_root": "sdk", "kernel_file": "guide/page.rst",
                  "code_block": {"ordinal": 1, "contains": "four back-to-back matmuls"}})
    folder = tmp_path / "points"
    folder.mkdir()
    (folder / "points.json").write_text(json.dumps([point]))
    pred, why = BENCH.predict(folder, point, sdk=sdk)
    assert pred is not None and why == ""
    (tmp_path / "direct").mkdir()
    direct = BENCH.predict(_folder(tmp_path / "direct", []), _point("x", "matmuls", 1.0, 1))[0]
    assert pred == pytest.approx(direct)  # the same kernel as a file of the folder
    pred, why = BENCH.predict(folder, point)
    assert pred is None and "--sdk" in why
