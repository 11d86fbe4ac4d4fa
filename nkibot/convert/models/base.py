"""The ModelBackend interface: one model turn over a conversation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from nkibot.results import TokenUsage
from nkibot.task import Task


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, object]


def _code_schema(what: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {"code": {"type": "string", "description": what}},
        "required": ["code"],
    }


TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("compile_kernel",
             "Compile an NKI kernel file and report errors with their kernel lines and fixes.",
             _code_schema("the complete kernel file (imports and the @nki.jit function)")),
    ToolSpec("verify_kernel",
             "Compile the kernel, then run it against the PyTorch reference over several "
             "random trials with anti-cheat guards; reports per-trial error statistics.",
             _code_schema("the complete kernel file (imports and the @nki.jit function)")),
    ToolSpec("lookup_nki",
             "Look up a section of the NKI guide: tiling, matmul with PSUM, reductions, "
             "activations, dtypes, common errors.",
             {"type": "object",
              "properties": {"topic": {"type": "string", "description": "what to look up"}},
              "required": ["topic"]}),
)


class ToolCall(BaseModel):
    id: str
    name: Literal["compile_kernel", "verify_kernel", "lookup_nki"] | str
    arguments: dict[str, object] = Field(default_factory=dict)


class ToolResult(BaseModel):
    tool_call_id: str
    content: str
    is_error: bool = False


class Message(BaseModel):
    role: Literal["user", "assistant"]
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)


class Conversation(BaseModel):
    """System prompt (static, cacheable prefix) plus the running message list."""

    task: Task
    system: str
    messages: list[Message] = Field(default_factory=list)
    #: The last compile/verify feedback, carried forward when the router escalates.
    last_feedback: str | None = None


class ModelReply(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    model: str = ""
    #: Set by backends that decline a task outright (e.g. the lowering on conv2d).
    declined: str | None = None


@runtime_checkable
class ModelBackend(Protocol):
    """One model seam. Every capability a caller may ask about is declared here; a backend
    that has nothing special to say inherits `ModelBackendBase`'s defaults."""

    name: str

    @property
    def label(self) -> str:
        """How results name it, e.g. "claude (claude-opus-4-5)"."""
        ...

    @property
    def deterministic(self) -> bool:
        """Asked again it would only repeat itself: one failed turn hands over."""
        ...

    @property
    def variants_left(self) -> int:
        """Other kernels it can still offer in the optimize phase (deterministic ones)."""
        ...

    @property
    def queued_variants(self) -> list[str]:
        """The sources of those variants, in the order they will be offered."""
        ...

    def reorder_variants(self, sources: list[str]) -> None:
        """Offer the queued variants in this order (the optimize phase: fastest first)."""
        ...

    async def turn(self, conversation: Conversation) -> ModelReply: ...

    async def preflight(self, task: Task) -> str | None:
        """A decline's reason known before the reference runs, or None."""
        ...

    async def aclose(self) -> None:
        """Release its clients (HTTP connections)."""
        ...


class ModelBackendBase:
    """The defaults: named by `name`, not deterministic, no variants, no preflight decline,
    nothing to close. A transport implements `name` and `turn` and overrides the rest only
    where it differs."""

    name: str = "model"
    deterministic: bool = False

    @property
    def label(self) -> str:
        return self.name

    @property
    def variants_left(self) -> int:
        return 0

    @property
    def queued_variants(self) -> list[str]:
        return []

    def reorder_variants(self, sources: list[str]) -> None:
        return None

    async def preflight(self, task: Task) -> str | None:
        return None

    async def aclose(self) -> None:
        return None
