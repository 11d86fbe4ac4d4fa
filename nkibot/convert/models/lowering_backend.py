"""LoweringBackend: the `lowering` model backend. Deterministic, offline, zero tokens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from nkibot.convert.models.base import Conversation, ModelBackendBase, ModelReply, ToolCall
from nkibot.lowering.plan import Declined, Lowered, Variant
from nkibot.task import Task
from nkibot.verify.sandbox import python_module_argv
from nkibot.verify.zygote import run as run_confined

CALL_ID = "lowering-verify"
#: At most this many tiling variants are taken from the child (each costs a verify run).
MAX_VARIANTS = 4
Lower = Callable[[Task], "Lowered | Declined"]


def lower_in_sandbox(task: Task, timeout_s: float = 60.0) -> Lowered | Declined:
    """Run the lowering child (it executes the user's module) and parse its answer."""
    outcome = run_confined(python_module_argv("nkibot.lowering"),
                            stdin=task.model_dump_json().encode(), timeout_s=timeout_s)
    if not outcome.ok:
        return Declined([], f"lowering failed in the sandbox: {outcome.reason()}",
                        module_error=True)
    lines = outcome.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        payload = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return Declined([], "lowering child printed no result", module_error=True)
    if "source" in payload:
        plan = payload.get("plan")
        return Lowered(payload["source"], payload["function"], list(payload.get("ops", [])),
                       _variants(payload.get("variants")),
                       [str(line) for line in plan] if isinstance(plan, list) else [])
    return Declined(list(payload.get("declined", [])), str(payload.get("reason", "declined")),
                    module_error=payload.get("module_error") is True)


def _variants(raw: object) -> list[Variant]:
    """The child's variants, each a {name, source} of strings; anything else is dropped."""
    if not isinstance(raw, list):
        return []
    return [Variant(v["name"][:80], v["source"]) for v in raw[:MAX_VARIANTS]
            if isinstance(v, dict) and isinstance(v.get("name"), str)
            and isinstance(v.get("source"), str)]


def _tried_before(conversation: Conversation) -> bool:
    return any(call.id == CALL_ID for msg in conversation.messages for call in msg.tool_calls)


def _feedback(conversation: Conversation) -> str:
    for msg in reversed(conversation.messages):
        for result in msg.tool_results:
            if result.tool_call_id == CALL_ID:
                return result.content.strip().splitlines()[0] if result.content.strip() else ""
    return (conversation.last_feedback or "").strip().splitlines()[0:1][0] if (
        conversation.last_feedback or "").strip() else ""


class LoweringBackend(ModelBackendBase):
    """First turn: the lowered kernel with a verify_kernel call. Later turns (the optimize
    phase, after it verified): its other tilings one by one, then decline."""

    name = "lowering"
    deterministic = True

    def __init__(self, *, timeout_s: float = 60.0, lower: Lower | None = None) -> None:
        self._timeout_s = timeout_s
        # `lower` replaces the sandboxed child (tests pass lower_task to stay in-process)
        self._lower = lower
        self._variants: list[Variant] = []
        self._result: tuple[Task, Lowered | Declined] | None = None

    @property
    def variants_left(self) -> int:
        """Tilings not offered yet: the optimize phase asks for them, timing each."""
        return len(self._variants)

    @property
    def queued_variants(self) -> list[str]:
        """The sources of the tilings not offered yet, in the order they will be."""
        return [v.source for v in self._variants]

    def reorder_variants(self, sources: list[str]) -> None:
        """Offer the queued tilings in this order (the optimize phase: fastest first)."""
        rank = {s: i for i, s in enumerate(sources)}
        self._variants.sort(key=lambda v: rank.get(v.source, len(rank)))

    async def turn(self, conversation: Conversation) -> ModelReply:
        if _tried_before(conversation) and self._variants:
            variant = self._variants.pop(0)
            n = MAX_VARIANTS - len(self._variants)
            return ModelReply(model=self.name, text=f"Change: {variant.name}\n",
                              tool_calls=[ToolCall(id=f"{CALL_ID}-variant{n}",
                                                   name="verify_kernel",
                                                   arguments={"code": variant.source})])
        if _tried_before(conversation):
            why = _feedback(conversation)
            reason = "the deterministic lowering has no other kernel to offer"
            return ModelReply(model=self.name,
                              declined=f"{reason}; its kernel failed: {why}" if why else reason)
        result = await self._lowered(conversation.task)
        if isinstance(result, Declined):
            return ModelReply(model=self.name, declined=result.reason)
        self._variants = list(result.variants)
        return ModelReply(model=self.name, text=reply_text(result),
                          tool_calls=[ToolCall(id=CALL_ID, name="verify_kernel",
                                               arguments={"code": result.source})])

    async def preflight(self, task: Task) -> str | None:
        """Lower `task` now, before any reference runs: the decline reason, or None.

        The result is kept for the first turn, so a task that lowers is lowered once. A
        module that would not build or trace gives None: its reference run explains that.
        """
        result = await self._lowered(task)
        if isinstance(result, Declined) and not result.module_error:
            return result.reason
        return None

    async def _lowered(self, task: Task) -> Lowered | Declined:
        if self._result is None or self._result[0] is not task:
            found = (self._lower(task) if self._lower is not None else
                     await asyncio.to_thread(lower_in_sandbox, task, self._timeout_s))
            self._result = (task, found)
        return self._result[1]


def reply_text(result: Lowered) -> str:
    ops = ", ".join(result.ops) or "no ops"
    return (f"Deterministic torch.fx lowering (no model, zero tokens) of: {ops}.\n"
            f"Kernel `{result.function}`:\n\n```python\n{result.source}```\n")
