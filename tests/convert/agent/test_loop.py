"""The compile-verify-fix loop, driven by the real SDK against the Messages double,
with kernels compiled and verified by the real simulator backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import run_loop
from nkibot.convert.agent.session import NUDGE
from nkibot.convert.models.anthropic import AnthropicBackend
from nkibot.convert.models.base import Conversation, ModelBackendBase, ModelReply, ToolCall
from nkibot.convert.models.router import Router
from nkibot.results import TurnRecord
from tests.convert.agent.episode import (
    GOOD,
    MEMORY_HOG,
    NUMERIC_BUG,
    WRONG_API,
    WRONG_TILE,
    SimTask,
)
from tests.convert.agent.test_feedback import assert_snapshot
from tests.fakes.anthropic import AnthropicDouble, text_reply, tool_reply, tools_reply


def _fence(code: str) -> str:
    return f"Here is the kernel:\n```python\n{code}```\n"


def _expect(fragments: list[str], reply: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """A scripted reply that first checks the newest user message holds each fragment."""

    def check(body: dict[str, Any]) -> dict[str, Any]:
        content = body["messages"][-1]["content"]
        text = "\n".join(b.get("text") or str(b.get("content", "")) for b in content)
        for fragment in fragments:
            assert fragment in text, f"{fragment!r} not in feedback:\n{text}"
        return reply

    return check


async def _run(sim_task: SimTask, sim_backend: Any, settings: Settings,
               router: Router | None = None, **kw: Any) -> Any:
    router = router or Router([AnthropicBackend(settings)])
    try:
        return await run_loop(sim_task.task, router=router, backend=sim_backend,
                              reference=sim_task.reference, settings=settings,
                              kernel_args=sim_task.args, **kw)
    finally:
        await router.aclose()


class TestEpisode:
    async def test_four_turn_episode(self, anthropic_double: AnthropicDouble, sim_task: SimTask,
                                     sim_backend: Any, claude_settings: Callable[..., Settings]
                                     ) -> None:
        """Wrong API, then too many partitions, then a numeric bug; each is fed back; turn 4
        verifies."""
        anthropic_double.enqueue(
            tool_reply("verify_kernel", {"code": WRONG_API}, input_tokens=1000,
                       cache_write=3000),
            _expect(["compile: FAILED", "activate", "usual fix"],
                    tool_reply("verify_kernel", {"code": WRONG_TILE}, cache_read=3000)),
            _expect(["[partition-dim] at kernel line 10", "    10 |     t = nl.ndarray((N, D)",
                     "partition dim 256 exceeds 128", "Relevant NKI guide",
                     "### Partition dimension over 128"],
                    tool_reply("verify_kernel", {"code": NUMERIC_BUG}, cache_read=3000)),
            _expect(["verify: FAILED (10 of 10 trials failed)", "max_abs", "mismatched",
                     "worst elements", "times ~1.5"],
                    tool_reply("verify_kernel", {"code": GOOD}, cache_read=3000)),
        )
        turns: list[TurnRecord] = []
        outcome = await _run(sim_task, sim_backend, claude_settings(), on_turn=turns.append)
        assert outcome.status == "verified", outcome.reasons
        assert [t.turn for t in turns] == [1, 2, 3, 4] and outcome.transcript == turns
        assert [t.compiled for t in turns] == [False, False, True, True]
        assert [t.verified for t in turns] == [False, False, False, True]
        assert turns[2].max_abs_error is not None and turns[2].max_abs_error > 0.1
        assert turns[2].worst is not None and "(trial " in turns[2].worst  # names its trial
        assert outcome.best_source == GOOD and outcome.verify is not None
        assert outcome.verify.passed and len(outcome.verify.trials) >= 5
        assert outcome.tokens.cache_read == 9000 and outcome.tokens.cache_write == 3000
        assert outcome.tokens.input == 4 * 100 + 900
        assert len(anthropic_double.requests) == 4
        first = anthropic_double.requests[0].body
        assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert "Name the kernel `model_kernel`" in first["system"][0]["text"]
        stable = [{"turn": t.turn, "model": t.model, "tools": [c.name for c in t.tool_calls],
                   "compiled": t.compiled, "verified": t.verified,
                   "error": t.error} for t in turns]
        assert_snapshot("episode_transcript.json", json.dumps(stable, indent=2) + "\n")


class TestReplies:
    async def test_code_without_tool_call_is_verified(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """A reply with a fenced kernel but no tool call is compiled and verified anyway."""
        anthropic_double.enqueue(text_reply(_fence(GOOD)))
        outcome = await _run(sim_task, sim_backend, claude_settings())
        assert outcome.status == "verified"
        assert [c.name for c in outcome.transcript[0].tool_calls] == ["verify_kernel"]

    async def test_reply_without_code_is_nudged(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """A reply without code or tool call gets a nudge, and the loop goes on."""
        anthropic_double.enqueue(text_reply("Let me think."),
                                 _expect([NUDGE], tool_reply("verify_kernel", {"code": GOOD})))
        outcome = await _run(sim_task, sim_backend, claude_settings())
        assert outcome.status == "verified" and len(outcome.transcript) == 2
        assert outcome.transcript[0].compiled is None

    async def test_lookup_tool_returns_guide(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """lookup_nki answers from the knowledge base as a tool_result."""
        anthropic_double.enqueue(
            tool_reply("lookup_nki", {"topic": "softmax"}),
            _expect(["### Softmax pattern"], tool_reply("verify_kernel", {"code": GOOD})))
        outcome = await _run(sim_task, sim_backend, claude_settings())
        assert outcome.status == "verified"
        assert anthropic_double.requests[1].body["messages"][-1]["content"][0]["type"] == (
            "tool_result")


    async def test_memory_hungry_kernel_is_a_failed_turn(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """A kernel that exhausts memory fails its turn with the reason; the loop goes on."""
        anthropic_double.enqueue(
            tool_reply("compile_kernel", {"code": MEMORY_HOG}),
            _expect(["compile: FAILED", "MemoryError", "hog = [0.0] * (1 << 34)"],
                    tool_reply("verify_kernel", {"code": GOOD})))
        outcome = await _run(sim_task, sim_backend, claude_settings())
        assert outcome.status == "verified"
        first = outcome.transcript[0]
        assert first.compiled is False and first.error is not None
        assert "MemoryError" in first.error

    async def test_several_tool_calls_in_one_reply(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """Calls run in order; once one verifies, the rest of the reply is skipped."""
        anthropic_double.enqueue(tools_reply(("lookup_nki", {"topic": "tiling"}),
                                             ("compile_kernel", {"code": NUMERIC_BUG}),
                                             ("verify_kernel", {"code": GOOD}),
                                             ("verify_kernel", {"code": WRONG_API})))
        outcome = await _run(sim_task, sim_backend, claude_settings())
        assert outcome.status == "verified"
        calls = outcome.transcript[0].tool_calls
        assert [c.name for c in calls] == ["lookup_nki", "compile_kernel", "verify_kernel"]
        assert calls[1].arguments == {"code": NUMERIC_BUG} and calls[1].ok
        assert calls[2].result_summary.startswith("verify: PASSED")


class TestBudgets:
    async def test_token_budget_stops(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """Once the job's tokens reach NKIBOT_MAX_TOKENS_PER_JOB, the loop stops and says so."""
        anthropic_double.enqueue(*[text_reply("hmm", input_tokens=600) for _ in range(3)])
        outcome = await _run(sim_task, sim_backend, claude_settings(max_tokens_per_job=1000))
        assert outcome.status == "failed" and len(outcome.transcript) == 2
        assert outcome.reasons == [
            "token budget exhausted: 1300 of 1000 tokens used (NKIBOT_MAX_TOKENS_PER_JOB)"]

    async def test_wall_budget_stops(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """A model call that outlives the wall-clock budget stops the loop with the reason."""
        anthropic_double.delay_s = 1.5
        anthropic_double.enqueue(text_reply("slow"))
        outcome = await _run(sim_task, sim_backend, claude_settings(max_wall_s_per_job=0.5))
        assert outcome.status == "failed"
        assert outcome.reasons == ["wall-clock budget exhausted: 0.5 s (NKIBOT_MAX_WALL_S_PER_JOB)"]

    async def test_turn_budget_stops(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """After max_turns failed turns the loop stops with the best (compiled) kernel."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": NUMERIC_BUG}),
                                 tool_reply("verify_kernel", {"code": WRONG_API}))
        outcome = await _run(sim_task, sim_backend, claude_settings(), max_turns=2)
        assert outcome.status == "compiled" and outcome.best_source == NUMERIC_BUG
        assert outcome.reasons == ["turn budget exhausted: 2 turns without a verified kernel"]

    async def test_cancel_at_turn_boundary(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """should_stop() is honoured between turns: status cancelled after the current turn."""
        anthropic_double.enqueue(text_reply("one"), text_reply("two"))
        seen: list[TurnRecord] = []
        outcome = await _run(sim_task, sim_backend, claude_settings(), on_turn=seen.append,
                             should_stop=lambda: bool(seen))
        assert outcome.status == "cancelled" and len(seen) == 1
        assert len(anthropic_double.requests) == 1

    async def test_failing_progress_callback_does_not_end_the_loop(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """An on_turn callback that raises is logged; the loop carries on to its budget."""
        anthropic_double.enqueue(text_reply("one"), text_reply("two"))

        def boom(record: TurnRecord) -> None:
            raise RuntimeError("check-run update failed")

        outcome = await _run(sim_task, sim_backend, claude_settings(), on_turn=boom,
                             max_turns=2)
        assert outcome.status == "failed" and len(outcome.transcript) == 2
        assert outcome.reasons == ["turn budget exhausted: 2 turns without a verified kernel"]

    async def test_model_failure_is_a_clear_reason(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """An API error (here: nothing scripted) ends the loop with the error as reason."""
        outcome = await _run(sim_task, sim_backend, claude_settings())
        anthropic_double.errors.clear()
        assert outcome.status == "failed"
        assert outcome.reasons[0].startswith("model backend claude failed:")
        assert "no scripted reply left" in outcome.reasons[0]


class BrokenLowering(ModelBackendBase):
    """A stand-in for the lowering's model seam: one deterministic (wrong) kernel."""

    name = "lowering"
    deterministic = True

    def __init__(self, code: str) -> None:
        self.code = code
        self.calls = 0

    async def turn(self, conversation: Conversation) -> ModelReply:
        self.calls += 1
        return ModelReply(text=f"```python\n{self.code}```", model="lowering",
                          tool_calls=[ToolCall(id="lower-1", name="verify_kernel",
                                               arguments={"code": self.code})])


class TestEscalation:
    async def test_lowering_failure_carried_to_claude(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]
    ) -> None:
        """The lowering's failed kernel is turn 0; Claude's first message quotes it and its
        failure."""
        settings = claude_settings()
        lowering = BrokenLowering(NUMERIC_BUG)
        anthropic_double.enqueue(_expect(
            ["earlier attempt by the `lowering` backend", "operand0=3.0", "verify: FAILED",
             "max_abs"], tool_reply("verify_kernel", {"code": GOOD})))
        router = Router([lowering, AnthropicBackend(settings)])
        outcome = await _run(sim_task, sim_backend, settings, router=router)
        assert outcome.status == "verified"
        assert [(t.turn, t.model) for t in outcome.transcript] == [(0, "lowering"),
                                                                  (1, "claude-test")]
        assert lowering.calls == 1
        assert outcome.models == "lowering -> claude (claude-test)"
        first = anthropic_double.requests[0].body["messages"]
        assert len(first) == 1 and first[0]["role"] == "user"
