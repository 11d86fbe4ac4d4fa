"""Feedback is short and actionable: error, quoted line, usual fix; statistics for numerics."""

from __future__ import annotations

from pathlib import Path

from nkibot.convert.agent import feedback
from nkibot.results import (
    CompileResult,
    Diagnostic,
    TrialStats,
    VerifyResult,
    WorstElement,
)
from tests import snapshots

SNAPSHOTS = Path(__file__).parent / "snapshots"

KERNEL = """import nki
import nki.language as nl
import nki.isa as nisa

@nki.jit
def k(x):
    t = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.sbuf)
    return t
"""


def assert_snapshot(name: str, text: str) -> None:
    snapshots.assert_snapshot(SNAPSHOTS, name, text)


def _trial(i: int, passed: bool, label: str = "normal", **kw: object) -> TrialStats:
    base: dict[str, object] = dict(
        trial=i, seed=i, label=label, passed=passed, max_abs_error=0.0, max_rel_error=0.0,
        mean_abs_error=0.0, mismatched=0, total=4096, atol=1e-3, rtol=1e-3,
        expected_shape=[64, 64], actual_shape=[64, 64])
    base.update(kw)
    return TrialStats.model_validate(base)


class TestCompileFeedback:
    def test_error_line_and_fix(self) -> None:
        """A compile error names the rule, quotes the kernel line and gives the usual fix."""
        result = CompileResult(ok=False, compiler="nkibot-sim", diagnostics=[Diagnostic(
            rule="partition-dim", line=7,
            message="tile partition dimension 256 exceeds nl.tile_size.pmax (128)")])
        text = feedback.compile_feedback(result, KERNEL)
        assert "    7 |     t = nl.ndarray((256, 64), dtype=x.dtype, buffer=nl.sbuf)" in text
        assert "usual fix: tile the first (partition) dimension" in text
        assert_snapshot("compile_partition.txt", text)

    def test_diagnostic_fix_wins_over_table(self) -> None:
        """The backend's own fix text is preferred to the generic table."""
        diag = Diagnostic(rule="partition-dim", message="m", fix="split rows by 128")
        assert feedback.usual_fix(diag) == "split rows by 128"

    def test_log_tail_when_no_diagnostics(self) -> None:
        """A failure without diagnostics shows the tail of the log."""
        result = CompileResult(ok=False, log="line1\nTraceback\nNameError: name 'q' is not defined")
        assert "NameError: name 'q' is not defined" in feedback.compile_feedback(result, "")

    def test_success_is_one_line(self) -> None:
        """A successful compile is a single line."""
        text = feedback.compile_feedback(CompileResult(ok=True, compiler="nkibot-sim",
                                                       seconds=0.25), KERNEL)
        assert text == "compile: OK (nkibot-sim, 0.2 s)"


class TestVerifyFeedback:
    def test_numeric_failure_has_statistics_and_worst(self) -> None:
        """Numeric failures list per-trial statistics, worst elements and a hint."""
        worst = [WorstElement(index=[3, 17], expected=1.5, actual=0.75, abs_error=0.75)]
        trials = [
            _trial(0, False, max_abs_error=0.75, max_rel_error=0.5, mean_abs_error=0.2,
                   mismatched=4096, worst=worst),
            _trial(1, False, max_abs_error=0.7, max_rel_error=0.4, mean_abs_error=0.19,
                   mismatched=4096),
            _trial(2, True, label="large magnitude", seed=None),
        ]
        text = feedback.verify_feedback(VerifyResult(passed=False, trials=trials), KERNEL)
        assert "trial 0 (seed 0, normal): FAIL max_abs 0.75" in text
        assert "mismatched 4096/4096" in text
        assert "[3, 17]: expected 1.5 got 0.75" in text
        assert "(almost) every element is wrong" in text
        assert_snapshot("verify_numeric.txt", text)

    def test_nan_points_at_unstored_rows(self) -> None:
        """NaN outputs get the never-stored hint."""
        trials = [_trial(0, False, mismatched=100, nan_count=100, max_abs_error=float("nan"))]
        text = feedback.verify_feedback(VerifyResult(passed=False, trials=trials), KERNEL)
        assert "NaN 100" in text and "never stored" in text

    def test_guard_failures_explain_what_is_forbidden(self) -> None:
        """Guard reasons are named and explained."""
        result = VerifyResult(passed=False, reasons=["static:imports-torch",
                                                     "guard:inputs-modified"])
        text = feedback.verify_feedback(result, KERNEL)
        assert "- static:imports-torch — kernels may not import or call torch" in text
        assert "- guard:inputs-modified — the kernel wrote into an input" in text
        assert_snapshot("verify_guards.txt", text)

    def test_shape_mismatch(self) -> None:
        """A wrong output shape is reported with both shapes."""
        trials = [_trial(0, False, shape_ok=False, actual_shape=[64, 32])]
        text = feedback.verify_feedback(VerifyResult(passed=False, trials=trials), KERNEL)
        assert "SHAPE expected [64, 64] got [64, 32]" in text

    def test_summary_joins_verdict_and_first_detail(self) -> None:
        """The one-line summary keeps the verdict and the first detail."""
        assert feedback.summary("compile: FAILED (sim)\nerror [x]: boom\nmore") == (
            "compile: FAILED (sim): error [x]: boom")
        assert feedback.summary("verify: PASSED all 6 trials") == "verify: PASSED all 6 trials"


class TestStaticRuleFeedback:
    def test_static_finding_names_rule_line_and_fix(self) -> None:
        """A refused construct renders as rule, kernel line, quoted source and the fix."""
        from nkibot.backends.sim import SimBackend
        from nkibot.task import InputSpec, Task

        src = KERNEL.replace("    return t\n", "    v = x._arr\n    return t\n")
        task = Task(reference_source="", entry_point="M",
                    inputs=[InputSpec(name="x", shape=(4, 4), dtype="float32")])
        result = SimBackend().compile(src, task)
        text = feedback.compile_feedback(result, src)
        assert "error [static:underscore-attribute] at kernel line 8: ._arr" in text
        assert "    8 |     v = x._arr" in text
        assert "usual fix: attributes starting with _ are private" in text
        assert "static:underscore-attribute static:" not in text
