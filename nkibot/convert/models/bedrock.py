"""Claude through Amazon Bedrock's `converse` API, with the same three tools.

boto3 is synchronous, so each call runs in a worker thread. Cache points mark the static
prefix (system prompt, tool definitions) as on the Anthropic API.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, cast

import boto3

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
_CACHE_POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}


class ConverseClient(Protocol):
    def converse(self, **kwargs: Any) -> dict[str, Any]: ...


def tool_config() -> dict[str, Any]:
    tools: list[dict[str, Any]] = [
        {"toolSpec": {"name": t.name, "description": t.description,
                      "inputSchema": {"json": t.input_schema}}}
        for t in TOOL_SPECS
    ]
    return {"tools": [*tools, _CACHE_POINT]}


def _content(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "user":
        blocks += [
            {"toolResult": {"toolUseId": r.tool_call_id, "content": [{"text": r.content}],
                            "status": "error" if r.is_error else "success"}}
            for r in message.tool_results
        ]
    if message.text.strip():
        blocks.append({"text": message.text})
    if message.role == "assistant":
        blocks += [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}}
            for c in message.tool_calls
        ]
    return blocks or [{"text": "(no content)"}]


def converse_request(conversation: Conversation, *, model_id: str,
                     max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> dict[str, Any]:
    """The keyword arguments of one `converse` call (pure)."""
    return {
        "modelId": model_id,
        "system": [{"text": conversation.system}, _CACHE_POINT],
        "messages": [{"role": m.role, "content": _content(m)} for m in conversation.messages],
        "toolConfig": tool_config(),
        "inferenceConfig": {"maxTokens": max_output_tokens},
    }


def reply_of(response: dict[str, Any], model_id: str) -> ModelReply:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in response.get("output", {}).get("message", {}).get("content", []):
        if "text" in block:
            texts.append(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            calls.append(ToolCall(id=use["toolUseId"], name=use["name"],
                                  arguments=dict(use.get("input") or {})))
    usage = response.get("usage", {})
    tokens = TokenUsage(
        input=int(usage.get("inputTokens", 0)), output=int(usage.get("outputTokens", 0)),
        cache_read=int(usage.get("cacheReadInputTokens", 0)),
        cache_write=int(usage.get("cacheWriteInputTokens", 0)),
    )
    return ModelReply(text="\n".join(texts), tool_calls=calls, tokens=tokens, model=model_id)


def bedrock_available(settings: Settings) -> bool:
    """AWS credentials and a region are configured (boto3's own chain decides).

    A service process moved its AWS keys from the environment into boto3's default
    session at start (nkibot.config.hygiene), so that session is asked first.
    """
    session = boto3.DEFAULT_SESSION or boto3.Session(region_name=settings.aws_region)
    region = settings.aws_region or session.region_name
    return session.get_credentials() is not None and region is not None


class BedrockBackend(ModelBackendBase):
    """A ModelBackend over Bedrock `converse` (`name` "bedrock")."""

    name = "bedrock"

    def __init__(self, settings: Settings, *, client: ConverseClient | None = None,
                 max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> None:
        self.model_id = settings.bedrock_model_id
        self.max_output_tokens = max_output_tokens
        self._client = client or cast(
            ConverseClient, boto3.client("bedrock-runtime", region_name=settings.aws_region))

    @property
    def label(self) -> str:
        return f"bedrock ({self.model_id})"

    async def turn(self, conversation: Conversation) -> ModelReply:
        request = converse_request(conversation, model_id=self.model_id,
                                   max_output_tokens=self.max_output_tokens)
        response = await asyncio.to_thread(lambda: self._client.converse(**request))
        return reply_of(response, self.model_id)
