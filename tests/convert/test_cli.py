"""`nkibot convert` end to end as a subprocess, against the Messages double and the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nkibot.convert.cli import summary_lines
from nkibot.results import ConversionResult, ProfileResult, TrialStats, VerifyResult
from tests.convert.agent.episode import GOOD, NUMERIC_BUG, REFERENCE
from tests.fakes.anthropic import AnthropicDouble, tool_reply

ROOT = Path(__file__).resolve().parents[2]


def _env(double: AnthropicDouble) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NKIBOT_", "ANTHROPIC_", "AWS_", "TRITON_"))}
    env.update(ANTHROPIC_BASE_URL=double.base_url, ANTHROPIC_API_KEY=double.api_key,
               NKIBOT_ANTHROPIC_MAX_RETRIES="0", NKIBOT_ANTHROPIC_MODEL="claude-test",
               PYTHONPATH=str(ROOT))
    return env


def _run_cli(
    double: AnthropicDouble, tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    ref = tmp_path / "scale.py"
    ref.write_text(REFERENCE, encoding="utf-8")
    env = _env(double)
    argv = [sys.executable, "-m", "nkibot.cli", "convert", f"{ref}::Model", "--model", "claude",
            "--backend", "sim", "--out", str(tmp_path / "out"), *extra]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


class TestConvertCli:
    def test_json_result_verified(self, anthropic_double: AnthropicDouble, tmp_path: Path) -> None:
        """--model claude --backend sim --json prints a verified result with every field; exit 0."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": GOOD}))
        proc = _run_cli(anthropic_double, tmp_path, "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["status"] == "verified"
        assert result["backend"] == "sim" and result["hardware"] is False
        assert result["model"] == "claude (claude-test)" and result["turns"] == 1
        assert result["tokens"]["input"] == 100 and result["tokens"]["output"] == 50
        kernel = result["kernel"]
        assert kernel["function"] == "model_kernel" and kernel["path"].endswith(".py")
        assert [(a["source"], a["index"]) for a in kernel["args"]] == [("input", 0)]
        assert len(result["verify"]["trials"]) >= 5
        assert all(t["passed"] for t in result["verify"]["trials"])
        assert result["reasons"] == []
        assert any((tmp_path / "out").rglob("*.py")), "the kernel file was not written"
        headers = anthropic_double.requests[0].headers
        assert anthropic_double.api_key in (headers.get("x-api-key"),
                                            headers.get("authorization", "")[7:])

    def test_unverified_exits_nonzero(self, anthropic_double: AnthropicDouble,
                                      tmp_path: Path) -> None:
        """A kernel that never verifies exits 1 and the summary says why, marked simulated."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": NUMERIC_BUG}))
        proc = _run_cli(anthropic_double, tmp_path, "--turns", "1")
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert proc.stdout.startswith("COMPILED: ")
        assert "SIMULATED on" in proc.stdout and "turn budget exhausted" in proc.stdout
        assert "turn 1 [claude-test]: compiled" in proc.stderr

    def test_shape_override_and_lowering(self, anthropic_double: AnthropicDouble,
                                         tmp_path: Path) -> None:
        """--shape overrides get_inputs(); --model lowering needs no key and no tokens."""
        proc = _run_cli(anthropic_double, tmp_path, "--json", "--model", "lowering",
                        "--shape", "x=128x32xfloat32")
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["status"] == "verified" and result["model"] == "lowering"
        assert result["kernel"]["args"][0]["shape"] == [128, 32]
        assert result["tokens"]["input"] == 0 and anthropic_double.requests == []

    def test_bad_shape_is_refused(self, anthropic_double: AnthropicDouble,
                                  tmp_path: Path) -> None:
        """A malformed --shape exits 2 with the expected format."""
        proc = _run_cli(anthropic_double, tmp_path, "--shape", "x=abc")
        assert proc.returncode == 2 and "NAME=DIMSxDTYPE" in proc.stderr

    def test_bad_target_is_a_usage_error(self, anthropic_double: AnthropicDouble,
                                         tmp_path: Path) -> None:
        """A target without ::Name is refused before anything runs."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("NKIBOT_")}
        proc = subprocess.run([sys.executable, "-m", "nkibot.cli", "convert", "nofile.py"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 2 and "FILE::Name" in proc.stderr
        assert anthropic_double.requests == []


FIXTURES = ROOT / "tests" / "fixtures"


class TestConvertTritonTarget:
    def test_triton_kernel_converts_and_its_test_passes(
            self, anthropic_double: AnthropicDouble, tmp_path: Path) -> None:
        """FILE::kernel for a @triton.jit kernel verifies; the written test runs on CPU too."""
        pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")
        (tmp_path / "add.py").write_text((FIXTURES / "triton" / "add.py").read_text())
        anthropic_double.enqueue(tool_reply("verify_kernel", {
            "code": (FIXTURES / "kernels" / "add_ok.py").read_text()}))
        env = _env(anthropic_double)
        argv = [sys.executable, "-m", "nkibot.cli", "convert", "add.py::add_kernel", "--model",
                "claude", "--backend", "sim", "--out", "out", "--json"]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout)["status"] == "verified"
        (test_file,) = (tmp_path / "out").rglob("test_*.py")
        ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              str(test_file)], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300, check=False)
        assert ran.returncode == 0 and "3 passed" in ran.stdout, ran.stdout[-3000:]


class TestSummary:
    def test_simulated_results_say_so(self) -> None:
        """Without hardware, the summary says the result is simulated."""
        result = ConversionResult(
            status="verified", target="m.py::M", backend="sim", hardware=False,
            simulator="nkibot-sim", model="lowering", turns=1,
            verify=VerifyResult(passed=True, trials=[TrialStats(trial=0, seed=0, passed=True,
                                                                max_abs_error=1e-6)]))
        lines = summary_lines(result, [Path("out/k.py")])
        assert lines[0] == ("VERIFIED: m.py::M (SIMULATED on nkibot-sim (no hardware); "
                            "checked for trn1)")
        assert ("verification: 1/1 trials passed, max abs error 1e-06 (trial 0; max rel 0)"
                in lines)
        assert lines[-1] == "wrote out/k.py"

    def test_the_cost_model_headline_carries_its_label(self) -> None:
        """Off hardware the summary gives the modelled time, labelled as an estimate."""
        profile = ProfileResult(hardware=False, measured_on="simulator: not a latency measurement",
                                model={"label": "model estimate (trn2), not a measurement",
                                       "time_us": 16.7749, "roofline_fraction": 0.359,
                                       "critical_engine": "vector"})
        result = ConversionResult(status="verified", target="m.py::M", backend="sim",
                                  hardware=False, model="lowering", profile=profile)
        lines = summary_lines(result, [])
        assert ("modelled: 16.775 µs, roofline 36%, bottleneck vector "
                "(model estimate (trn2), not a measurement)") in lines
        profile.model = {}
        assert not any(line.startswith("modelled:") for line in summary_lines(result, []))

    def test_hardware_results_say_so(self) -> None:
        """On a device the summary names the hardware."""
        result = ConversionResult(status="failed", target="m.py::M", backend="neuron",
                                  hardware=True, model="claude", reasons=["no luck"])
        lines = summary_lines(result, [])
        assert lines[0] == "FAILED: m.py::M (on Trn1 hardware)" and "reason: no luck" in lines


class TestSummaryHonesty:
    def test_isolation_is_printed(self) -> None:
        """The summary states the sandbox's isolation, as the JSON does."""
        result = ConversionResult(
            status="verified", target="m.py::M", backend="sim", hardware=False,
            simulator="nkibot-sim", model="lowering", turns=1,
            verify=VerifyResult(passed=True, isolation=["isolation: reduced",
                                                        "missing: bubblewrap sandbox"],
                                trials=[TrialStats(trial=0, seed=0, passed=True,
                                                   max_abs_error=1e-6)]))
        assert "isolation: reduced (bubblewrap sandbox missing)" in summary_lines(result, [])[1]

    def test_nothing_ran_is_not_called_simulated(self) -> None:
        """A reference that failed, or no backend: no 'SIMULATED on none'; the host's
        isolation is said as the host's."""
        result = ConversionResult(status="failed", target="m.py::M", backend="none",
                                  hardware=False, model="lowering",
                                  reasons=["the reference module raised"])
        lines = summary_lines(result, [], host_isolation="full")
        assert "SIMULATED" not in lines[0] and "on none" not in lines[0]
        assert lines[0] == ("FAILED: m.py::M (no kernel was run, on a simulator or a device; "
                            "checked for trn1)")
        assert "isolation: full (this host's sandbox)" in lines[1]

    def test_stress_error_names_its_trial_and_relative_error(self) -> None:
        """bf16 at x + 100 has steps of 0.5: the summary and the progress line name the
        trial and give the relative error beside the absolute one."""
        trials = [TrialStats(trial=0, seed=1, passed=True, max_abs_error=0.004,
                             max_rel_error=0.002, label="normal"),
                  TrialStats(trial=6, seed=None, passed=True, max_abs_error=0.5,
                             max_rel_error=0.0039, label="x + 100")]
        result = ConversionResult(status="verified", target="m.py::M", backend="sim",
                                  hardware=False, simulator="nkibot-sim", model="lowering",
                                  verify=VerifyResult(passed=True, trials=trials))
        assert ("verification: 2/2 trials passed, max abs error 0.5 (trial 6, x + 100; "
                "max rel 0.0039)") in summary_lines(result, [])
        from io import StringIO

        from rich.console import Console

        from nkibot.convert.cli import Progress
        from nkibot.results import TurnRecord, worst_error

        out = StringIO()
        Progress(Console(file=out, width=200, log_path=False)).on_turn(TurnRecord(
            turn=1, model="lowering", verified=True, max_abs_error=0.5,
            worst=worst_error(trials)))
        assert "verified max abs error 0.5 (trial 6, x + 100; max rel 0.0039)" in out.getvalue()
