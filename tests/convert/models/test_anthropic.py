"""The Anthropic backend speaks the Messages API (through the real SDK) to the double."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.convert.models.anthropic import AnthropicBackend
from nkibot.convert.models.base import Conversation, Message, ToolCall, ToolResult
from nkibot.task import InputSpec, Task
from tests.fakes.anthropic import AnthropicDouble, text_reply, tool_reply, validate_request


def _task() -> Task:
    return Task(reference_source="class M: pass\n", entry_point="M",
                inputs=[InputSpec(name="x", shape=(4, 8))])


def _settings(double: AnthropicDouble, **extra: Any) -> Settings:
    return Settings(_env_file=None, anthropic_api_key=SecretStr(double.api_key),
                    anthropic_base_url=double.base_url, anthropic_max_retries=0, **extra)


class TestAnthropicBackend:
    async def test_tool_use_and_usage_are_mapped(self, anthropic_double: AnthropicDouble) -> None:
        """A tool_use reply becomes a ToolCall, and usage (cache fields too) TokenUsage."""
        anthropic_double.enqueue(tool_reply(
            "verify_kernel", {"code": "import nki\n"}, text="trying", input_tokens=11,
            output_tokens=7, cache_read=500, cache_write=40))
        backend = AnthropicBackend(_settings(anthropic_double, anthropic_model="claude-x"))
        conv = Conversation(task=_task(), system="SYS", messages=[Message(role="user", text="go")])
        reply = await backend.turn(conv)
        await backend.aclose()
        assert reply.text == "trying" and reply.model == "claude-x"
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [
            ("verify_kernel", {"code": "import nki\n"})]
        assert (reply.tokens.input, reply.tokens.output) == (11, 7)
        assert (reply.tokens.cache_read, reply.tokens.cache_write) == (500, 40)

    async def test_request_marks_cache_and_carries_tools(
        self, anthropic_double: AnthropicDouble
    ) -> None:
        """System block, last tool and newest message carry cache_control; tools are offered."""
        anthropic_double.enqueue(text_reply("ok"))
        backend = AnthropicBackend(_settings(anthropic_double))
        conv = Conversation(task=_task(), system="SYS", messages=[
            Message(role="user", text="go"),
            Message(role="assistant", text="", tool_calls=[
                ToolCall(id="toolu_1", name="compile_kernel", arguments={"code": "x"})]),
            Message(role="user", tool_results=[
                ToolResult(tool_call_id="toolu_1", content="compile: FAILED", is_error=True)]),
        ])
        await backend.turn(conv)
        await backend.aclose()
        body = anthropic_double.requests[0].body
        assert body["system"] == [{"type": "text", "text": "SYS",
                                   "cache_control": {"type": "ephemeral"}}]
        assert [t["name"] for t in body["tools"]] == [
            "compile_kernel", "verify_kernel", "lookup_nki"]
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][0]["input_schema"]["required"] == ["code"]
        assistant, result = body["messages"][1], body["messages"][2]
        assert assistant["content"] == [{"type": "tool_use", "id": "toolu_1",
                                         "name": "compile_kernel", "input": {"code": "x"}}]
        assert result["content"][0]["type"] == "tool_result"
        assert result["content"][0]["tool_use_id"] == "toolu_1"
        assert result["content"][0]["is_error"] is True
        assert result["content"][-1]["cache_control"] == {"type": "ephemeral"}

    async def test_bearer_auth_is_accepted(self, anthropic_double: AnthropicDouble) -> None:
        """The double accepts `Authorization: Bearer` as well as `x-api-key`."""
        anthropic_double.enqueue(text_reply("bearer ok"))
        client = anthropic.AsyncAnthropic(auth_token=anthropic_double.api_key,
                                          base_url=anthropic_double.base_url, max_retries=0)
        backend = AnthropicBackend(_settings(anthropic_double), client=client)
        reply = await backend.turn(Conversation(task=_task(), system="S",
                                                messages=[Message(role="user", text="hi")]))
        await backend.aclose()
        headers = anthropic_double.requests[0].headers
        assert reply.text == "bearer ok"
        assert headers["authorization"] == f"Bearer {anthropic_double.api_key}"

    async def test_wrong_key_is_refused(self, anthropic_double: AnthropicDouble) -> None:
        """A wrong key gets the API's authentication error, raised by the SDK."""
        settings = Settings(_env_file=None, anthropic_api_key=SecretStr("wrong"),
                            anthropic_base_url=anthropic_double.base_url, anthropic_max_retries=0)
        backend = AnthropicBackend(settings)
        with pytest.raises(anthropic.AuthenticationError):
            await backend.turn(Conversation(task=_task(), system="S",
                                            messages=[Message(role="user", text="hi")]))
        await backend.aclose()
        assert anthropic_double.requests == []


class TestSettingsAliases:
    def test_sdk_variable_names_are_honoured(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL fill the settings when NKIBOT_ ones are unset."""
        monkeypatch.delenv("NKIBOT_ANTHROPIC_API_KEY", raising=False)
        monkeypatch.delenv("NKIBOT_ANTHROPIC_BASE_URL", raising=False)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sdk-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        s = Settings(_env_file=None)
        assert s.anthropic_api_key is not None
        assert s.anthropic_api_key.get_secret_value() == "sdk-key"
        assert s.anthropic_base_url == "http://127.0.0.1:9"

    def test_nkibot_names_win(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """NKIBOT_ANTHROPIC_API_KEY takes precedence over ANTHROPIC_API_KEY."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sdk-key")
        monkeypatch.setenv("NKIBOT_ANTHROPIC_API_KEY", "ours")
        s = Settings(_env_file=None)
        assert s.anthropic_api_key is not None
        assert s.anthropic_api_key.get_secret_value() == "ours"

    def test_field_names_still_work(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Settings(anthropic_api_key=...) by field name still sets the value."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        monkeypatch.delenv("NKIBOT_ANTHROPIC_API_KEY", raising=False)
        s = Settings(_env_file=None, anthropic_api_key=SecretStr("k"), anthropic_base_url="u")
        assert s.anthropic_api_key is not None
        assert (s.anthropic_api_key.get_secret_value(), s.anthropic_base_url) == ("k", "u")


class TestDoubleValidation:
    def _body(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 10, "messages": messages}

    def test_well_formed_tool_exchange_passes(self) -> None:
        """A tool_use answered by its tool_result is accepted."""
        body = self._body([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t",
                                               "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                          "content": "ok"}]},
        ])
        assert validate_request(body) is None

    def test_structural_errors_are_refused(self) -> None:
        """Unanswered tool_use, repeated roles and empty text are refused, as the API does."""
        unanswered = self._body([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t",
                                               "input": {}}]},
            {"role": "user", "content": [{"type": "text", "text": "next"}]},
        ])
        assert "without tool_result" in str(validate_request(unanswered))
        repeated = self._body([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
        assert "alternate" in str(validate_request(repeated))
        empty = self._body([{"role": "user", "content": [{"type": "text", "text": " "}]}])
        assert "non-empty" in str(validate_request(empty))

    async def test_sdk_sees_a_bad_request(self, anthropic_double: AnthropicDouble) -> None:
        """An invalid conversation gets a 400 through the SDK (and is recorded as an error)."""
        backend = AnthropicBackend(_settings(anthropic_double))
        conv = Conversation(task=_task(), system="S", messages=[
            Message(role="user", text="a"), Message(role="user", text="b")])
        with pytest.raises(anthropic.BadRequestError):
            await backend.turn(conv)
        await backend.aclose()
        assert anthropic_double.errors[0].startswith("invalid request: messages.1")
        anthropic_double.errors.clear()
