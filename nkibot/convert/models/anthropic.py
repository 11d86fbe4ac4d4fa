"""Claude through the Anthropic Messages API, with tools and prompt caching.

The static prefix (system prompt and tool definitions) carries `cache_control`, and so
does the newest message, so each turn reads the previous turn's prefix from the cache.
"""

from __future__ import annotations

from typing import Any, cast

from anthropic import AsyncAnthropic
from anthropic.types import Message as ApiMessage
from anthropic.types import MessageParam, TextBlockParam, ToolParam

from nkibot.config.settings import Settings
from nkibot.convert.models.base import (
    TOOL_SPECS,
    Conversation,
    Message,
    ModelBackendBase,
    ModelReply,
    ToolCall,
)
from nkibot.results import TokenUsage

DEFAULT_MAX_OUTPUT_TOKENS = 8192
_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def tool_params() -> list[ToolParam]:
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in TOOL_SPECS
    ]
    tools[-1]["cache_control"] = _EPHEMERAL
    return cast(list[ToolParam], tools)


def system_blocks(system: str) -> list[TextBlockParam]:
    return [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "user":
        blocks += [
            {"type": "tool_result", "tool_use_id": r.tool_call_id, "content": r.content,
             "is_error": r.is_error}
            for r in message.tool_results
        ]
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    if message.role == "assistant":
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
            for c in message.tool_calls
        ]
    if not blocks:  # the API rejects empty content; an empty turn still has to be shown
        blocks.append({"type": "text", "text": "(no content)"})
    return blocks


def to_messages(conversation: Conversation) -> list[MessageParam]:
    """Our conversation as Messages API messages; the newest block marks the cache point."""
    out: list[dict[str, Any]] = [
        {"role": m.role, "content": _blocks(m)} for m in conversation.messages
    ]
    if out:
        out[-1]["content"][-1]["cache_control"] = _EPHEMERAL
    return cast(list[MessageParam], out)


def usage_of(message: ApiMessage) -> TokenUsage:
    u = message.usage
    return TokenUsage(
        input=u.input_tokens,
        output=u.output_tokens,
        cache_read=u.cache_read_input_tokens or 0,
        cache_write=u.cache_creation_input_tokens or 0,
    )


def reply_of(message: ApiMessage) -> ModelReply:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            args = block.input if isinstance(block.input, dict) else {}
            calls.append(ToolCall(id=block.id, name=block.name, arguments=dict(args)))
    return ModelReply(text="\n".join(texts), tool_calls=calls, tokens=usage_of(message),
                      model=message.model)


class AnthropicBackend(ModelBackendBase):
    """A ModelBackend over the Messages API (`name` "claude")."""

    name = "claude"

    def __init__(self, settings: Settings, *, client: AsyncAnthropic | None = None,
                 max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> None:
        key = settings.anthropic_api_key
        self.model = settings.anthropic_model
        self.max_output_tokens = max_output_tokens
        self._client = client or AsyncAnthropic(
            api_key=key.get_secret_value() if key is not None else None,
            base_url=settings.anthropic_base_url,
            timeout=settings.anthropic_timeout_s,
            max_retries=settings.anthropic_max_retries,
        )

    @property
    def label(self) -> str:
        return f"claude ({self.model})"

    async def turn(self, conversation: Conversation) -> ModelReply:
        message = await self._client.messages.create(
            model=self.model,
            max_tokens=self.max_output_tokens,
            system=system_blocks(conversation.system),
            tools=tool_params(),
            messages=to_messages(conversation),
        )
        return reply_of(message)

    async def aclose(self) -> None:
        await self._client.close()
