"""A local Anthropic Messages API double: `POST /v1/messages` on 127.0.0.1.

Tests script it with a queue of replies. Each entry is a reply dict (built with
`text_reply` / `tool_reply`) or a function of the request body returning one, so a test
can assert what the loop sent (e.g. the compile error it fed back) at the moment it is
sent. Every request is recorded with its headers. Both auth styles are accepted:
`x-api-key: <key>` and `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

Reply = dict[str, Any]
Script = Reply | Callable[[dict[str, Any]], Reply]

_ids = itertools.count(1)


def _usage(input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> Reply:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write}


def text_reply(text: str, *, input_tokens: int = 100, output_tokens: int = 50,
               cache_read: int = 0, cache_write: int = 0) -> Reply:
    """A plain assistant answer (stop_reason end_turn)."""
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": _usage(input_tokens, output_tokens, cache_read, cache_write)}


def tool_reply(name: str, arguments: dict[str, Any], *, text: str = "",
               input_tokens: int = 100, output_tokens: int = 50, cache_read: int = 0,
               cache_write: int = 0) -> Reply:
    """An assistant answer that calls one tool (stop_reason tool_use)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name,
                    "input": arguments})
    return {"content": content, "stop_reason": "tool_use",
            "usage": _usage(input_tokens, output_tokens, cache_read, cache_write)}


def tools_reply(*calls: tuple[str, dict[str, Any]], text: str = "", input_tokens: int = 100,
                output_tokens: int = 50) -> Reply:
    """An assistant answer that calls several tools in one turn."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name,
                 "input": arguments} for name, arguments in calls]
    return {"content": content, "stop_reason": "tool_use",
            "usage": _usage(input_tokens, output_tokens, 0, 0)}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _tool_pairing(messages: list[dict[str, Any]]) -> str | None:
    for i, message in enumerate(messages):
        uses = {b["id"] for b in _blocks(message) if b.get("type") == "tool_use"}
        if message["role"] != "assistant" or not uses or i + 1 >= len(messages):
            continue
        results = {b.get("tool_use_id") for b in _blocks(messages[i + 1])
                   if b.get("type") == "tool_result"}
        if uses - results:
            return f"messages.{i + 1}: tool_use ids without tool_result: {sorted(uses - results)}"
        if results - uses:
            return f"messages.{i + 1}: tool_result for unknown tool_use ids"
    return None


def validate_request(body: dict[str, Any]) -> str | None:
    """The Messages API's structural rules the real service enforces, as far as we rely on them."""
    if not body.get("model") or not isinstance(body.get("max_tokens"), int):
        return "model and max_tokens are required"
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "messages must start with a user message"
    for i, message in enumerate(messages):
        if i and message.get("role") == messages[i - 1].get("role"):
            return f"messages.{i}: roles must alternate between user and assistant"
        blocks = _blocks(message)
        if not blocks:
            return f"messages.{i}: content must not be empty"
        if any(b.get("type") == "text" and not b.get("text", "").strip() for b in blocks):
            return f"messages.{i}: text content blocks must be non-empty"
    marks = sum("cache_control" in b for m in messages for b in _blocks(m))
    marks += sum("cache_control" in t for t in body.get("tools") or [])
    system = body.get("system")
    marks += sum("cache_control" in b for b in system) if isinstance(system, list) else 0
    if marks > 4:
        return f"at most 4 blocks may carry cache_control, found {marks}"
    return _tool_pairing(messages)


@dataclass
class Recorded:
    body: dict[str, Any]
    headers: dict[str, str]

    def last_user_text(self) -> str:
        """All text (plain and tool_result) of the newest user message."""
        content = self.body["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        parts: list[str] = []
        for block in content:
            if block.get("type") == "text":
                parts.append(block["text"])
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                parts.append(inner if isinstance(inner, str) else str(inner))
        return "\n".join(parts)


@dataclass
class AnthropicDouble:
    """The double's state: its URL, key, scripted replies and recorded requests."""

    api_key: str = "sk-ant-test-double"
    script: deque[Script] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    base_url: str = ""

    def enqueue(self, *replies: Script) -> None:
        self.script.extend(replies)

    def _authorised(self, headers: dict[str, str]) -> bool:
        return (headers.get("x-api-key") == self.api_key
                or headers.get("authorization") == f"Bearer {self.api_key}")

    def handle(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Reply]:
        if not self._authorised(headers):
            return 401, {"type": "error", "error": {"type": "authentication_error",
                                                   "message": "invalid x-api-key"}}
        self.requests.append(Recorded(body, headers))
        problem = validate_request(body)
        if problem is not None:
            self.errors.append(f"invalid request: {problem}")
            return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": problem}}
        if not self.script:
            self.errors.append("no scripted reply left")
            return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "double: no scripted reply left"}}
        entry = self.script.popleft()
        try:
            reply = entry(body) if callable(entry) else entry
        except AssertionError as exc:  # a test's check on the request: report, don't hang
            self.errors.append(f"request check failed: {exc}")
            return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": f"double: {exc}"}}
        if self.delay_s:
            time.sleep(self.delay_s)
        message = {"id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude-test"), "stop_sequence": None, **reply}
        return 200, message


def build_app(double: AnthropicDouble) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/messages")
    def messages(payload: dict[str, Any], request: Request) -> JSONResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, body = double.handle(payload, headers)
        return JSONResponse(body, status_code=status)

    return app
