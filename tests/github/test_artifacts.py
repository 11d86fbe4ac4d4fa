"""The files a conversion writes: provenance header, a pytest file that really checks, report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nkibot.github import artifacts
from nkibot.github.artifacts import (
    header_line_count,
    kernel_file_text,
    provenance_header,
    write_local_outputs,
)
from nkibot.results import (
    ConversionResult,
    KernelArg,
    KernelInfo,
    TrialStats,
    VerifyResult,
)
from nkibot.task import InputSpec, Task

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kernels"
ROOT = Path(__file__).resolve().parents[2]


def relu_result(kernel_file: str = "relu_ok.py", status: str = "verified") -> ConversionResult:
    return ConversionResult(
        status=status,  # type: ignore[arg-type]
        target="relu_ref.py::Model", backend="sim", hardware=False, simulator="nkibot-sim",
        model="lowering", turns=1,
        kernel=KernelInfo(path="nki_kernels/relu_ref_model_nki.py", function="relu_kernel",
                          source=(FIXTURES / kernel_file).read_text(),
                          args=[KernelArg(name="x", source="input", index=0, shape=[200, 64])]),
        verify=VerifyResult(passed=True, trials=[TrialStats(trial=0, seed=0, passed=True,
                                                            atol=1e-4, rtol=1e-4)]))


def relu_task() -> Task:
    ref = FIXTURES / "relu_ref.py"
    return Task(reference_source=ref.read_text(), entry_point="Model", source_path=str(ref),
                reference_file=str(ref), inputs=[InputSpec(name="x", shape=(200, 64))])


def run_pytest(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True, text=True, cwd=path.parent, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})


class TestKernelFile:
    def test_header_records_provenance(self) -> None:
        """The header names source, commit, model, backend, date and calling convention."""
        text = kernel_file_text(relu_result(), sha="abc123", repo="octo/models",
                                date="2026-01-02")
        header = text.split("\n\n", 1)[0]
        for needle in ("source: relu_ref.py::Model", "commit: octo/models@abc123",
                       "model: lowering", "simulated by nkibot-sim", "date: 2026-01-02",
                       "calling convention: kernel(*forward_inputs",
                       "kernel arguments: x [200, 64] float32 (input 0)"):
            assert needle in header
        assert all(line.startswith("# ") for line in header.splitlines())
        assert text.endswith((FIXTURES / "relu_ok.py").read_text())

    def test_header_line_count_matches_the_shift(self) -> None:
        """header_line_count is exactly how far kernel line 1 moves in the file."""
        result = relu_result()
        text = kernel_file_text(result, sha="abc", repo="o/r")
        offset = header_line_count(result, sha="abc", repo="o/r")
        assert text.splitlines()[offset] == result.kernel.source.splitlines()[0]  # type: ignore[union-attr]
        assert offset == len(provenance_header(result, sha="abc", repo="o/r")) + 1

    def test_no_kernel_is_an_error(self) -> None:
        """Asking for the kernel file of a result without a kernel raises."""
        with pytest.raises(ValueError, match="no kernel"):
            kernel_file_text(relu_result().model_copy(update={"kernel": None}), sha=None,
                             repo=None)


class TestLocalOutputs:
    def test_writes_kernel_test_and_report(self, tmp_path: Path) -> None:
        """A verified result writes the kernel, its pytest file and report.md."""
        written = write_local_outputs(relu_result(), relu_task(), tmp_path)
        names = sorted(p.relative_to(tmp_path).as_posix() for p in written)
        assert names == ["nki_kernels/relu_ref_model_nki.py",
                         "nki_kernels/test_relu_ref_model_nki.py", "pytest.ini", "report.md"]
        assert "# nkibot report" in (tmp_path / "report.md").read_text()
        assert artifacts.test_path_for("a/b_nki.py") == "a/test_b_nki.py"

    def test_unverified_results_get_no_test_file(self, tmp_path: Path) -> None:
        """A kernel that did not verify is written for inspection, without a test."""
        written = write_local_outputs(relu_result(status="compiled"), relu_task(), tmp_path)
        assert [p.name for p in written] == ["relu_ref_model_nki.py", "report.md"]

    def test_generated_test_passes_for_a_correct_kernel(self, tmp_path: Path) -> None:
        """The generated pytest file runs the kernel in the simulator and passes."""
        write_local_outputs(relu_result(), relu_task(), tmp_path)
        proc = run_pytest(tmp_path / "nki_kernels" / "test_relu_ref_model_nki.py")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "3 passed" in proc.stdout

    def test_generated_test_runs_inside_a_project_with_strict_pytest_config(
            self, tmp_path: Path) -> None:
        """Inside a project whose pyproject configures pytest-asyncio strictly (and the plugin
        is not loaded, as after `pip install .`), `pytest nki_out/...` still runs the test:
        without the pytest.ini nkibot writes, pytest stops with INTERNALERROR."""
        (tmp_path / "pyproject.toml").write_text(
            '[project]\nname = "userproj"\nversion = "0"\n'
            "[tool.pytest.ini_options]\n"
            'asyncio_mode = "strict"\nasyncio_default_fixture_loop_scope = "function"\n'
            'addopts = "--strict-config --strict-markers -p no:asyncio"\n'
            'filterwarnings = ["error"]\n')
        written = write_local_outputs(relu_result(), relu_task(), tmp_path / "nki_out")
        assert tmp_path / "nki_out" / "pytest.ini" in written
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "nki_out/nki_kernels/"],
            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "3 passed" in proc.stdout
        header = (tmp_path / "nki_out" / "nki_kernels" / "test_relu_ref_model_nki.py").read_text()
        assert "pytest -c /dev/null --rootdir" in header

    def test_an_existing_pytest_ini_is_kept(self, tmp_path: Path) -> None:
        (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = mine\n")
        written = write_local_outputs(relu_result(), relu_task(), tmp_path)
        assert tmp_path / "pytest.ini" not in written
        assert (tmp_path / "pytest.ini").read_text() == "[pytest]\nmarkers = mine\n"

    def test_int64_inputs_and_state_arrive_as_int32(self, tmp_path: Path) -> None:
        """Token ids (an int64 input) and BatchNorm's num_batches_tracked (int64 state) reach
        the kernel as int32, the calling convention: the simulator refused them before
        ("kernel argument 4: int64 is not an NKI dtype"), so the generated test of every
        module with a BatchNorm or an embedding failed although the kernel verified."""
        from nkibot.lowering import Lowered, lower_task

        ref = tmp_path / "emb_ref.py"
        ref.write_text("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n"
                       "        self.bn = nn.BatchNorm1d(16)\n"
                       "        self.emb = nn.Embedding(50, 16)\n\n"
                       "    def forward(self, x, ids):\n"
                       "        return self.bn(x) * 2 + self.emb(ids)\n")
        task = Task(reference_source=ref.read_text(), entry_point="Model",
                    source_path=str(ref), reference_file=str(ref),
                    inputs=[InputSpec(name="x", shape=(4, 16)),
                            InputSpec(name="ids", shape=(4,), dtype="int64")])
        lowered = lower_task(task)
        assert isinstance(lowered, Lowered), lowered
        state = [("bn.weight", [16], "float32"), ("bn.bias", [16], "float32"),
                 ("bn.running_mean", [16], "float32"), ("bn.running_var", [16], "float32"),
                 ("bn.num_batches_tracked", [], "int64"), ("emb.weight", [50, 16], "float32")]
        args = [KernelArg(name="x", source="input", index=0, shape=[4, 16]),
                KernelArg(name="ids", source="input", index=1, shape=[4], dtype="int64"),
                *(KernelArg(name=k.replace(".", "_"), source="state_dict", key=k, shape=sh,
                            dtype=dt) for k, sh, dt in state)]
        result = ConversionResult(
            status="verified", target="emb_ref.py::Model", backend="sim", hardware=False,
            simulator="nkibot-sim", model="lowering", turns=1,
            kernel=KernelInfo(path="nki_kernels/emb_ref_model_nki.py",
                              function=lowered.function, source=lowered.source, args=args),
            verify=VerifyResult(passed=True, trials=[TrialStats(trial=0, seed=0, passed=True,
                                                                atol=1e-4, rtol=1e-4)]))
        write_local_outputs(result, task, tmp_path)
        proc = run_pytest(tmp_path / "nki_kernels" / "test_emb_ref_model_nki.py")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "3 passed" in proc.stdout

    def test_generated_test_fails_for_a_wrong_kernel(self, tmp_path: Path) -> None:
        """The same test fails when the kernel's outputs do not match the reference."""
        write_local_outputs(relu_result("zeros.py"), relu_task(), tmp_path)
        proc = run_pytest(tmp_path / "nki_kernels" / "test_relu_ref_model_nki.py")
        assert proc.returncode == 1, proc.stdout[-3000:]
        assert "Mismatched elements" in proc.stdout
