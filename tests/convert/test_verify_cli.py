"""`nkibot verify`: adversarial kernels are rejected with their reason, a correct one passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nkibot.cli import app
from nkibot.results import CompileResult, VerifyResult
from nkibot.verify.check import verdict

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
TARGET = f"{KERNELS / 'relu_ref.py'}::Model"


def _verify(kernel: str, *extra: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(app, ["verify", TARGET, "--kernel", str(KERNELS / kernel),
                                      "--json", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


class TestVerifyCommand:
    def test_correct_kernel_passes(self) -> None:
        """A correct kernel verifies: exit 0, every trial passes, fields as convert's."""
        code, out = _verify("relu_ok.py::relu_kernel", "--trials", "3")
        assert code == 0, out["reasons"]
        assert out["status"] == "verified" and out["reasons"] == []
        assert out["backend"] == "sim" and out["hardware"] is False
        assert out["simulator"] == "nkibot-sim"
        verify = out["verify"]
        assert isinstance(verify, dict) and verify["passed"] is True
        # 3 seeds + the large-magnitude, two offset (+-100), overflow-scale and
        # special-values trials
        assert len(verify["trials"]) == 8
        assert verify["trials"][-1]["label"] == "special values"
        assert [t["label"].split(",")[0] for t in verify["trials"]].count("normal") == 3
        kernel = out["kernel"]
        assert isinstance(kernel, dict) and kernel["function"] == "relu_kernel"
        assert kernel["args"][0]["source"] == "input"

    @pytest.mark.parametrize(
        ("kernel", "reason"),
        [
            ("zeros.py", "guard:outputs-constant"),
            ("copy_input.py", "guard:output-copies-input"),
            ("mutate_input.py", "guard:inputs-modified x"),
            ("imports_torch.py", "static:import-not-allowed torch"),
            ("reads_file.py", "static:file-access open"),
            ("uses_exec.py", "static:exec exec"),
            # np.random and a module-level cache are refused before anything runs; the
            # dynamic guards behind them are tested in tests/verify/test_judge.py.
            ("nondeterministic.py", "static:numpy-name np.random"),
            ("seed_cache.py", "static:module-state"),
        ],
    )
    def test_adversarial_kernel_rejected(self, kernel: str, reason: str) -> None:
        """Each cheating kernel exits 1 and names the guard that caught it."""
        code, out = _verify(kernel)
        assert code == 1
        assert out["status"] in ("failed", "compiled")
        reasons = out["reasons"]
        assert isinstance(reasons, list)
        assert any(str(r).startswith(reason) for r in reasons), reasons

    def test_table_output(self) -> None:
        """Without --json a table and the reasons are printed."""
        result = CliRunner().invoke(app, ["verify", TARGET, "--kernel",
                                          str(KERNELS / "imports_torch.py")])
        assert result.exit_code == 1
        assert "static:import-not-allowed torch" in result.stdout

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["verify", TARGET, "--kernel", "/nonexistent/k.py"], "cannot verify"),
            (["verify", f"{KERNELS / 'relu_ref.py'}::Nope", "--kernel",
              str(KERNELS / "relu_ok.py")], "classes and functions found: Model"),
            (["verify", TARGET, "--kernel", str(KERNELS / "relu_ok.py"),
              "--shape", "x=4xfloat99"], "float99"),
        ],
    )
    def test_bad_arguments_exit_2(self, args: list[str], message: str) -> None:
        """A missing kernel, a wrong class name or a bad shape exits 2 with a message."""
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2
        assert message in result.stderr or message in result.output


TRITON_ADD = f"{Path(__file__).resolve().parents[1] / 'fixtures' / 'triton' / 'add.py'}::add_kernel"


class TestVerifyTritonTarget:
    @pytest.mark.parametrize(("kernel", "code"), [("add_ok.py", 0), ("add_wrong.py", 1)])
    def test_nki_kernel_against_triton_launcher(self, kernel: str, code: int) -> None:
        """A Triton kernel's launcher is the reference: a correct add passes, a wrong fails."""
        pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")
        result = CliRunner().invoke(app, ["verify", TRITON_ADD, "--kernel",
                                          str(KERNELS / kernel), "--json", "--trials", "2"])
        assert result.exit_code == code, result.output
        out = json.loads(result.stdout)
        assert out["status"] == ("verified" if code == 0 else "compiled")
        if code:
            assert any("numeric:mismatch" in r for r in out["reasons"])


class TestVerdict:
    def test_status_mapping(self) -> None:
        """Compile failure is failed; verify failure is compiled; both ok is verified."""
        ok = CompileResult(ok=True)
        assert verdict(CompileResult(ok=False, log="boom"), None)[0] == "failed"
        failed = VerifyResult(passed=False, reasons=["guard:nondeterministic"])
        assert verdict(ok, failed) == ("compiled", ["guard:nondeterministic"])
        assert verdict(ok, VerifyResult(passed=True)) == ("verified", [])


class TestMisleadingErrors:
    def test_syntax_error_names_the_error_and_its_line(self, tmp_path: Path) -> None:
        """A kernel file that does not parse says so, with the line; not 'no @nki.jit'."""
        kernel = tmp_path / "k.py"
        kernel.write_text("import nki\n\n@nki.jit\ndef k(x):\n    return x +\n")
        result = CliRunner().invoke(app, ["verify", TARGET, "--kernel", str(kernel)])
        assert result.exit_code == 2
        assert "does not parse: invalid syntax at line 5" in result.stderr
        assert "no @nki.jit" not in result.stderr

    def test_unknown_function_is_a_usage_error(self) -> None:
        """KERNEL.py::nope is refused before anything runs (exit 2), naming what exists."""
        result = CliRunner().invoke(app, ["verify", TARGET, "--kernel",
                                          f"{KERNELS / 'relu_ok.py'}::nope", "--json"])
        assert result.exit_code == 2 and result.stdout == ""
        assert "defines no function `nope`" in result.stderr

    def test_mistyped_dims_are_not_called_a_dtype(self) -> None:
        result = CliRunner().invoke(app, ["verify", TARGET, "--kernel",
                                          str(KERNELS / "relu_ok.py"), "--shape", "x=128by256"])
        assert result.exit_code == 2
        assert "`128by256` in `x=128by256` is not a dim" in result.stderr
        assert "dtype `128by256`" not in result.stderr


class TestTable:
    def test_trials_are_ints_and_nothing_is_cut_at_80_columns(self) -> None:
        result = CliRunner().invoke(app, ["verify", TARGET, "--kernel",
                                          str(KERNELS / "relu_ok.py")], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        rows = [ln.split() for ln in result.stdout.splitlines() if ln.strip()[:1].isdigit()]
        assert [r[0] for r in rows[:5]] == ["0", "1", "2", "3", "4"]
        assert "…" not in result.stdout
        assert max(len(ln) for ln in result.stdout.splitlines()) <= 80
