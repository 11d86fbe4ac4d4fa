"""The same flow with a scripted Claude episode from the Anthropic Messages double."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from nkibot.jobs.factory import open_job_state
from tests.e2e.conftest import REPO, Stack
from tests.fakes.anthropic import AnthropicDouble, tool_reply

GOOD = (Path(__file__).resolve().parent.parent / "fixtures" / "kernels" / "relu_ok.py").read_text()
# Allocates a 256-partition tile: the simulator refuses it (partition-dim).
BROKEN = GOOD.replace("tile = nl.load(x[p0:p0 + p, f0:f0 + f])",
                      "tile = nl.ndarray((256, f), dtype=x.dtype, buffer=nl.sbuf)")
COMMAND = "/nki convert src/models/act.py::Act --model claude"


def claude(stack: Stack, double: AnthropicDouble) -> dict[str, Any]:
    return {"anthropic_api_key": SecretStr(double.api_key),
            "anthropic_base_url": double.base_url, "anthropic_max_retries": 0,
            "anthropic_model": "claude-test"}


class TestClaudeFlow:
    def test_scripted_episode_fixes_its_kernel(self, stack: Stack,
                                               anthropic_double: AnthropicDouble) -> None:
        """Claude's broken first kernel is fed back; the second verifies and is published."""
        assert BROKEN != GOOD
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": BROKEN}, text="Try 1."),
                                 tool_reply("verify_kernel", {"code": GOOD}, text="Fixed."))
        stack.comment(COMMAND)
        stack.dispatch()
        stack.run_jobs(**claude(stack, anthropic_double))
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success", run["output"]["summary"]
        assert "partition" in anthropic_double.requests[1].last_user_text()
        summary, text = run["output"]["summary"], run["output"]["text"]
        assert "| 2 | 200 / 100 / 0 / 0 |" in summary  # turns and tokens from the double
        assert "Turn 1 · claude" in text and "compile failed" in text
        (pr,) = stack.pulls()
        assert '"T1 compile error", "T2 verified"' in pr.body
        files = stack.github.files_at(REPO, "nki/src-models-act-act")
        assert GOOD.strip() in files["nki_kernels/act_act_nki.py"].decode()

    def test_cancel_stops_at_the_next_turn(self, stack: Stack,
                                           anthropic_double: AnthropicDouble) -> None:
        """/nki cancel during a run stops it at the turn boundary; the check run is cancelled."""

        def cancel_then_fail(_body: dict[str, Any]) -> dict[str, Any]:
            state = open_job_state(stack.settings)
            for job in state.find(REPO):
                state.mark_cancelled(job.id)
            return tool_reply("verify_kernel", {"code": BROKEN})

        anthropic_double.enqueue(cancel_then_fail)
        stack.comment(COMMAND)
        stack.dispatch()
        stack.run_jobs(**claude(stack, anthropic_double))
        (run,) = stack.check_runs()
        assert run["status"] == "completed" and run["conclusion"] == "cancelled"
        assert len(anthropic_double.requests) == 1  # no second turn
        assert not stack.pulls()
        assert stack.replies()[-1].startswith("⏹️ Act: conversion cancelled")

    def test_cancel_from_another_host_reaches_the_runner(
            self, stack: Stack, anthropic_double: AnthropicDouble, tmp_path: Path) -> None:
        """A cancel handled by the service on another host stops the run via its check run."""

        def cancel_then_fail(_body: dict[str, Any]) -> dict[str, Any]:
            stack.comment("/nki cancel", comment_id=9002)
            stack.dispatch()
            # The model is slow to answer: the runner's watcher (1 s poll) sees the check run
            # completed as cancelled while this turn is still in flight.
            time.sleep(2.5)
            return tool_reply("verify_kernel", {"code": BROKEN})

        anthropic_double.enqueue(cancel_then_fail)
        stack.comment(COMMAND)
        stack.dispatch()
        # The runner keeps its own job-state file: it cannot see the service's cancel flag.
        stack.run_jobs(state_path=tmp_path / "runner-host-state.db", **claude(stack,
                                                                           anthropic_double))
        (run,) = stack.check_runs()
        assert run["status"] == "completed" and run["conclusion"] == "cancelled"
        assert len(anthropic_double.requests) == 1  # stopped at the turn boundary
        assert not stack.pulls()
