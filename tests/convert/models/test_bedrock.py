"""The Bedrock backend sends valid `converse` requests (checked by botocore) and maps replies."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ParamValidationError
from botocore.stub import Stubber

from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import run_loop
from nkibot.convert.models.base import Conversation, Message, ToolCall, ToolResult
from nkibot.convert.models.bedrock import BedrockBackend, converse_request
from nkibot.convert.models.router import Router
from nkibot.task import InputSpec, Task
from tests.convert.agent.episode import GOOD, SimTask, sim_task

__all__ = ["sim_task"]  # the fixture, used by name below

MODEL = "anthropic.claude-test-v1:0"


def _client() -> Any:
    return boto3.client("bedrock-runtime", region_name="us-east-1",
                        aws_access_key_id="AKIDTEST", aws_secret_access_key="secret")


def _conversation() -> Conversation:
    task = Task(reference_source="class M: pass\n", entry_point="M",
                inputs=[InputSpec(name="x", shape=(4, 8))])
    return Conversation(task=task, system="SYSTEM", messages=[
        Message(role="user", text="convert it"),
        Message(role="assistant", text="compiling", tool_calls=[
            ToolCall(id="tu_1", name="compile_kernel", arguments={"code": "import nki\n"})]),
        Message(role="user", tool_results=[
            ToolResult(tool_call_id="tu_1", content="compile: FAILED ...", is_error=True)]),
    ])


def _response(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42,
                  "cacheReadInputTokens": 900, "cacheWriteInputTokens": 5},
        "metrics": {"latencyMs": 10},
    }


class TestBedrockBackend:
    async def test_request_shape_is_valid_and_reply_mapped(self) -> None:
        """botocore validates the converse request; toolUse and usage map into ModelReply."""
        client = _client()
        conv = _conversation()
        expected = converse_request(conv, model_id=MODEL)
        with Stubber(client) as stub:
            stub.add_response("converse", _response([
                {"text": "fixed"},
                {"toolUse": {"toolUseId": "tu_2", "name": "verify_kernel",
                             "input": {"code": "import nki\n"}}},
            ]), expected)
            backend = BedrockBackend(Settings(_env_file=None, bedrock_model_id=MODEL),
                                     client=client)
            reply = await backend.turn(conv)
            stub.assert_no_pending_responses()
        assert reply.text == "fixed" and reply.model == MODEL
        assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
            ("tu_2", "verify_kernel", {"code": "import nki\n"})]
        assert (reply.tokens.input, reply.tokens.output) == (30, 12)
        assert (reply.tokens.cache_read, reply.tokens.cache_write) == (900, 5)

    def test_request_carries_tools_results_and_cache_points(self) -> None:
        """The request offers the three tools, maps tool use/results, and marks cache points."""
        req = converse_request(_conversation(), model_id=MODEL)
        names = [t["toolSpec"]["name"] for t in req["toolConfig"]["tools"] if "toolSpec" in t]
        assert names == ["compile_kernel", "verify_kernel", "lookup_nki"]
        assert req["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default"}}
        assert req["system"] == [{"text": "SYSTEM"}, {"cachePoint": {"type": "default"}}]
        assistant, result = req["messages"][1], req["messages"][2]
        assert assistant["content"][1] == {"toolUse": {
            "toolUseId": "tu_1", "name": "compile_kernel", "input": {"code": "import nki\n"}}}
        assert result["content"][0]["toolResult"]["status"] == "error"
        assert result["content"][0]["toolResult"]["toolUseId"] == "tu_1"

    def test_validation_is_live(self) -> None:
        """A malformed block is refused by botocore's validation, so the check above is real."""
        client = _client()
        req = converse_request(_conversation(), model_id=MODEL)
        req["messages"][0]["content"] = [{"tool_use": {"id": "x"}}]
        with Stubber(client) as stub, pytest.raises(ParamValidationError):
            stub.add_response("converse", _response([{"text": "never returned"}]))
            client.converse(**req)


class TestBedrockInTheLoop:
    async def test_bedrock_reply_verifies_through_the_loop(self, sim_task: SimTask) -> None:
        """A converse toolUse of verify_kernel is run by the loop on the real simulator."""
        from nkibot.backends.sim import SimBackend

        client = _client()
        settings = Settings(_env_file=None, bedrock_model_id=MODEL)
        with Stubber(client) as stub:
            stub.add_response("converse", _response([
                {"toolUse": {"toolUseId": "tu_9", "name": "verify_kernel",
                             "input": {"code": GOOD}}}]))
            outcome = await run_loop(
                sim_task.task, router=Router([BedrockBackend(settings, client=client)]),
                backend=SimBackend(), reference=sim_task.reference, settings=settings,
                kernel_args=sim_task.args)
            stub.assert_no_pending_responses()
        assert outcome.status == "verified"
        assert outcome.models == f"bedrock ({MODEL})"
        assert outcome.tokens.cache_read == 900
