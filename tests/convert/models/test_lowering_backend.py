"""LoweringBackend: one zero-token kernel turn, then declines; the sandboxed child protocol."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nkibot.convert.models.base import Conversation, Message, ToolCall, ToolResult
from nkibot.convert.models.lowering_backend import LoweringBackend, lower_in_sandbox
from nkibot.lowering import Lowered, lower_task
from nkibot.lowering.frontend.catalogue import hint
from tests.lowering.lowering_support import (
    UNSUPPORTED_CHAIN,
    UNSUPPORTED_OPS,
    make_task,
    module_source,
    simulate,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SOFTMAX = module_source("torch.softmax(x, dim=-1)")


def _conversation(source: str, shapes: list[tuple[int, ...]]) -> Conversation:
    return Conversation(task=make_task(source, shapes), system="")


class TestLoweringBackend:
    """The backend's turns, in-process (the child's work replaced by lower_task)."""

    async def test_first_turn_offers_kernel(self) -> None:
        """The reply carries the kernel in text and in one verify_kernel call, zero tokens."""
        backend = LoweringBackend(lower=lower_task)
        reply = await backend.turn(_conversation(SOFTMAX, [(4, 16)]))
        assert reply.declined is None and reply.model == "lowering"
        assert [c.name for c in reply.tool_calls] == ["verify_kernel"]
        code = reply.tool_calls[0].arguments["code"]
        assert isinstance(code, str) and "@nki.jit" in code
        assert f"```python\n{code}```" in reply.text
        assert reply.tokens.total == 0

    async def test_later_turn_declines_with_feedback(self) -> None:
        """After its kernel failed, the deterministic backend declines and says why."""
        backend = LoweringBackend(lower=lower_task)
        conv = _conversation(SOFTMAX, [(4, 16)])
        first = await backend.turn(conv)
        conv.messages += [
            Message(role="assistant", text=first.text, tool_calls=first.tool_calls),
            Message(role="user", tool_results=[ToolResult(
                tool_call_id=first.tool_calls[0].id, is_error=True,
                content="numeric: max abs error 0.5 at [3, 1]\nmore detail")]),
        ]
        reply = await backend.turn(conv)
        assert reply.tool_calls == []
        assert reply.declined is not None
        assert "no other kernel" in reply.declined
        assert "max abs error 0.5 at [3, 1]" in reply.declined

    async def test_other_models_turns_do_not_count(self) -> None:
        """An earlier assistant turn by another model does not stop the lowering."""
        backend = LoweringBackend(lower=lower_task)
        conv = _conversation(SOFTMAX, [(4, 16)])
        conv.messages.append(Message(role="assistant", tool_calls=[
            ToolCall(id="toolu_1", name="verify_kernel", arguments={"code": "x"})]))
        reply = await backend.turn(conv)
        assert reply.declined is None and reply.tool_calls

    async def test_unsupported_declined(self) -> None:
        """Graphs of ops without handlers are declined with the op list."""
        reply = await LoweringBackend(lower=lower_task).turn(
            _conversation(UNSUPPORTED_CHAIN, [(2, 3, 16, 16)]))
        assert reply.declined == lower_task(_conversation(  # type: ignore[union-attr]
            UNSUPPORTED_CHAIN, [(2, 3, 16, 16)]).task).reason
        assert reply.declined is not None and reply.declined.endswith("; " + hint())
        assert reply.tool_calls == []

    async def test_preflight_decline_and_single_lowering(self) -> None:
        """preflight gives a decline's reason, and a task that lowers is lowered once for
        the preflight and the first turn together."""
        calls: list[object] = []

        def counting(task: object) -> object:
            calls.append(task)
            return lower_task(task)  # type: ignore[arg-type]

        backend = LoweringBackend(lower=counting)  # type: ignore[arg-type]
        conv = _conversation(SOFTMAX, [(4, 16)])
        assert await backend.preflight(conv.task) is None
        reply = await backend.turn(conv)
        assert reply.tool_calls and len(calls) == 1
        unsupported = _conversation(UNSUPPORTED_CHAIN, [(2, 3, 16, 16)]).task
        assert await backend.preflight(unsupported) == lower_task(unsupported).reason  # type: ignore[union-attr]

    async def test_preflight_leaves_broken_modules_to_the_reference(self) -> None:
        """A module that cannot even be built is no final decline: preflight says None,
        so the reference run reports the module's own error."""
        broken = module_source("x", init="        raise ValueError('bad init')")
        backend = LoweringBackend(lower=lower_task)
        assert await backend.preflight(make_task(broken, [(4, 16)])) is None
        reply = await backend.turn(_conversation(broken, [(4, 16)]))
        assert reply.declined is not None and "bad init" in reply.declined

    async def test_sandboxed_turn_runs_the_child(self) -> None:
        """Without an injected lowering the backend runs the sandboxed child process."""
        source = (EXAMPLES / "rmsnorm.py").read_text()
        task = make_task(source, [(4, 100, 512)], entry="RMSNorm", init_args=[512])
        reply = await LoweringBackend().turn(Conversation(task=task, system=""))
        assert reply.declined is None
        code = reply.tool_calls[0].arguments["code"]
        assert isinstance(code, str) and "def rmsnorm_kernel(x, weight):" in code


class TestSandboxChild:
    """`python -m nkibot.lowering`: Task JSON in, one JSON line out."""

    def test_lowered_json(self) -> None:
        """A supported task prints source, function and ops; the source runs on the sim."""
        task = make_task(SOFTMAX, [(4, 16)])
        result = lower_in_sandbox(task)
        assert isinstance(result, Lowered) and result.ops == ["torch.softmax"]
        import numpy as np

        x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
        (out,) = simulate(result.source, result.function, [x])
        expected = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)

    def test_declined_json(self) -> None:
        """An unsupported task prints the declined op list."""
        proc = subprocess.run(
            [sys.executable, "-m", "nkibot.lowering"],
            input=make_task(UNSUPPORTED_CHAIN, [(2, 3, 8, 8)]).model_dump_json().encode(),
            capture_output=True, timeout=60, check=True)
        payload = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert payload["declined"] == UNSUPPORTED_OPS

    def test_garbage_input_declines_instead_of_crashing(self) -> None:
        """Invalid JSON still yields a decline line and exit status 0."""
        proc = subprocess.run([sys.executable, "-m", "nkibot.lowering"],
                              input=b"{not json", capture_output=True, timeout=60, check=True)
        payload = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert payload["declined"] == [] and "lowering failed" in payload["reason"]
