"""The renderers: snapshots of the evidence, GitHub's limits, and honest charts."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.github import render
from nkibot.github.charts import convergence_chart, latency_chart
from tests.github import sample_results as S
from tests.snapshots import assert_snapshot

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def snapshot(name: str, text: str) -> None:
    assert_snapshot(SNAPSHOTS, name, text)


class TestSnapshots:
    def test_check_run_for_a_simulated_kernel(self) -> None:
        """A simulated result renders the same title, summary and text as its snapshot."""
        out = render.check_run_output(S.simulated())
        snapshot("check_run_simulated.md",
                 f"{out.title}\n\n---\n{out.summary}\n\n---\n{out.text}")

    def test_pr_body_for_a_hardware_kernel(self) -> None:
        """A hardware result's PR body (tables, both charts, files, Closes) matches its snapshot."""
        body = render.pr_body(S.hardware(), target="src/norm.py::RMSNorm", sha="a" * 40,
                              check_run_url="https://github.com/o/r/runs/1", closes_issue=5,
                              files=["nki_kernels/norm_nki.py", "nki_kernels/test_norm_nki.py"])
        snapshot("pr_body_hardware.md", body)

    def test_report_for_a_failed_compile(self) -> None:
        """A failed compile's Markdown report matches its snapshot."""
        snapshot("report_failed.md", render.markdown_report(S.compile_failed()))


class TestCheckRunOutput:
    def test_title_is_one_line_with_the_outcome(self) -> None:
        """Titles are single lines that name the outcome and where it was measured."""
        assert render.title(S.simulated()) == "Verified NKI kernel for RMSNorm (simulated, 2 turns)"
        failed = S.compile_failed().model_copy(update={"reasons": ["a\nb"]})
        assert "\n" not in render.title(failed)
        assert render.title(failed) == "RMSNorm: conversion failed: a"

    def test_conclusions_follow_the_status(self) -> None:
        """verified -> success, compiled -> neutral, failed -> failure, cancelled -> cancelled."""
        base = S.simulated()
        got = {s: render.conclusion(base.model_copy(update={"status": s}))
               for s in ("verified", "compiled", "failed", "declined", "cancelled")}
        assert got == {"verified": "success", "compiled": "neutral", "failed": "failure",
                       "declined": "failure", "cancelled": "cancelled"}

    def test_simulator_results_show_no_latency_numbers(self) -> None:
        """A simulated run says it is not a latency measurement and prints no µs figures."""
        summary = render.check_run_output(S.simulated()).summary
        assert "simulator: not a latency measurement" in summary
        assert "µs" not in summary and "p50" not in summary

    def test_hardware_results_compare_against_pytorch(self) -> None:
        """A hardware run shows kernel and PyTorch p50/p99 and the speed-up, on Trn1 hardware."""
        summary = render.summary(S.hardware())
        assert "Trn1 hardware" in summary
        assert "| NKI kernel | 40.0 | 55.0 |" in summary
        assert "| PyTorch (Neuron device) | 120.0 | 150.0 |" in summary
        assert "3.00×" in summary

    def test_text_is_cut_to_githubs_limit_with_a_note(self) -> None:
        """A huge transcript is cut to 65,535 characters and says so; the log tail survives."""
        big = S.compile_failed()
        turn = big.transcript[0].model_copy(update={"text": "x" * 2900})
        big = big.model_copy(update={"transcript": [turn.model_copy(update={"turn": i})
                                                    for i in range(60)]})
        text = render.check_run_output(big).text
        assert len(text) <= render.GITHUB_TEXT_LIMIT
        assert "were cut to fit GitHub's 65,535-character limit" in text
        assert text.rstrip().endswith("```") and "Compile log" in text

    def test_annotations_sit_on_kernel_lines_in_batches_of_50(self) -> None:
        """Compile diagnostics become annotations shifted by the header, sent 50 per request."""
        out = render.check_run_output(S.compile_failed(120), line_offset=10)
        assert len(out.annotations) == 120
        first = out.annotations[0]
        assert first["path"] == "nki_kernels/norm_rms_norm_nki.py"
        assert first["start_line"] == 11 and first["annotation_level"] == "failure"
        assert "Fix: tile by 128" in str(first["message"])
        assert [len(b) for b in out.batches()] == [50, 50, 20]
        assert len(out.payload()["annotations"]) == 50  # type: ignore[arg-type]


class TestCharts:
    def test_convergence_chart_has_a_bar_per_turn(self) -> None:
        """The convergence chart labels each turn's compile status and plots its error."""
        chart = convergence_chart(S.simulated())
        assert chart is not None
        assert '"T1 compile error", "T2 verified"' in chart
        assert "bar [0, 2e-06]" in chart

    def test_latency_chart_only_for_hardware(self) -> None:
        """No latency chart for simulated results; one with p50/p99 for hardware results."""
        assert latency_chart(S.simulated()) is None
        chart = latency_chart(S.hardware())
        assert chart is not None and "bar [120, 40, 150, 55]" in chart
        assert "```mermaid" not in render.markdown_report(S.simulated()).split(
            "xychart-beta")[1]  # exactly one chart in a simulated report

    @pytest.mark.parametrize("status", ["verified", "failed"])
    def test_reply_comment_links_pr_and_check_run(self, status: str) -> None:
        """The reply is a one-line outcome followed by the PR and check run links."""
        result = S.simulated().model_copy(update={"status": status})
        text = render.reply_comment(result, pr_url="https://x/pull/1",
                                    check_run_url="https://x/runs/2")
        assert text.splitlines()[0] == render.one_line(result)
        assert "[pull request](https://x/pull/1) · [check run](https://x/runs/2)" in text


class TestReportStory:
    def test_modelled_time_and_bottleneck_read_as_one_story(self) -> None:
        """Off hardware: no latency measured, the time is the model's, and the bottleneck is
        explained as the critical-path engine, not the busiest one in the chart."""
        from nkibot.results import ProfileResult

        result = S.simulated().model_copy(update={"profile": ProfileResult(
            hardware=False, measured_on="simulator: not a latency measurement",
            model={"label": "model estimate (trn1), not a measurement", "time_us": 12.5,
                   "roofline_fraction": 0.4, "roofline_bound": "memory", "roofline_us": 5.0,
                   "critical_engine": "vector", "utilisation": {"dma": 0.9, "vector": 0.5}})})
        text = render.markdown_report(result)
        assert ("no latency was measured; the time under Performance is the cost model's "
                "estimate of it, not a measurement.") in text
        assert "not a measurement: nothing here was timed" in text
        assert "Bottleneck: **vector**, the engine with the most time on the critical path" in text
        assert "can differ from the busiest engine in the chart" in text

    def test_isolation_is_in_the_report(self) -> None:
        result = S.simulated()
        assert result.verify is not None
        result.verify.isolation = ["isolation: full"]
        assert "· isolation: full" in render.markdown_report(result)


class TestOptimizeChain:
    def test_every_candidate_is_listed_with_whether_it_was_verified(self) -> None:
        """A candidate the cost model ranked slower is a row of its own: its modelled time,
        "not run" for verification, and the reason with both figures."""
        from nkibot.results import OptimizeStep

        label = "model estimate (trn1), not a measurement"
        chain = [
            OptimizeStep(turn=1, time_us=4659.5, source=label, change="first verified kernel",
                         verified=True, kept=True),
            OptimizeStep(turn=2, time_us=12112.4, source=label, change="matmul tiling stream",
                         reason="not verified: modelled slower (12,112 µs against 4,660 µs)"),
            OptimizeStep(turn=3, change="fold the scale", verified=False,
                         reason="did not verify"),
        ]
        table = render.optimize_table(S.simulated().model_copy(update={"optimize_chain": chain}))
        rows = table.splitlines()
        assert rows[0] == "| turn | time (µs) | change | verified | kept |"
        assert rows[2] == "| 1 | 4659.5 | first verified kernel | yes | yes |"
        assert rows[3] == ("| 2 | 12112.4 | matmul tiling stream | not run | no: not verified: "
                           "modelled slower (12,112 µs against 4,660 µs) |")
        assert rows[4] == "| 3 | - | fold the scale | no | no: did not verify |"
        assert table.endswith(f"Times: {label}.")
