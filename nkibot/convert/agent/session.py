"""One conversion's conversation state and the steps a turn is made of.

Both phases drive turns through this public step API: the fix loop (`loop.py`) and the
optimize phase (`optimize.py`). `begin_turn`, `ask`, `execute`, `finish_turn` are one
turn; `stop_reason` and `optimize_stop` say whether another may start. Neither phase
reaches into the other, so the arrows run loop -> optimize -> session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from nkibot.config.settings import Settings
from nkibot.convert.agent import feedback, knowledge
from nkibot.convert.agent.tools import ToolOutcome, ToolRunner, extract_code
from nkibot.convert.models.base import Conversation, Message, ModelReply, ToolResult
from nkibot.convert.models.router import Router
from nkibot.results import Status, TokenUsage, TurnRecord, worst_error
from nkibot.task import Task

log = structlog.get_logger(__name__)

NUDGE = ("No kernel found in your reply. Call `verify_kernel` with the complete kernel file "
         "(or put it in a ```python block).")


@dataclass(frozen=True)
class Turn:
    """A turn in progress: its number (0 for a precursor's), and when it began."""

    number: int
    precursor: bool
    started: float


def _rank(o: ToolOutcome) -> tuple[int, float]:
    if o.verified:
        return (3, 0.0)
    if o.compiled and o.max_abs_error is not None:
        return (2, -o.max_abs_error)
    return (1 if o.compiled else 0, 0.0)


@dataclass
class Session:
    """The task, the router, the tools, the budgets, and what the turns so far produced."""

    task: Task
    router: Router
    runner: ToolRunner
    settings: Settings
    max_turns: int
    started: float
    conversation: Conversation
    transcript: list[TurnRecord] = field(default_factory=list)
    tokens: TokenUsage = field(default_factory=TokenUsage)
    best: ToolOutcome | None = None
    last_kernel: ToolOutcome | None = None
    budget_turns: int = 0
    sent_sections: set[str] = field(default_factory=set)
    on_turn: Callable[[TurnRecord], None] | None = None
    should_stop: Callable[[], bool] | None = None

    def remaining_s(self) -> float:
        return self.settings.max_wall_s_per_job - (time.monotonic() - self.started)

    def consider(self, outcome: ToolOutcome) -> None:
        """Keep the best kernel so far: verified > closest compiled > compiled > any."""
        if outcome.code is None:
            return
        self.last_kernel = outcome
        if self.best is None or _rank(outcome) >= _rank(self.best):
            self.best = outcome

    def wall_reason(self) -> str:
        return (f"wall-clock budget exhausted: {self.settings.max_wall_s_per_job:g} s "
                "(NKIBOT_MAX_WALL_S_PER_JOB)")

    def stop_reason(self) -> tuple[Status, str] | None:
        """Why no further turn may start (cancelled, a budget spent), or None."""
        if self.should_stop is not None and self.should_stop():
            return "cancelled", "cancelled at a turn boundary"
        used, most = self.tokens.total, self.settings.max_tokens_per_job
        if used >= most:
            return "failed", (f"token budget exhausted: {used} of {most}"
                              " tokens used (NKIBOT_MAX_TOKENS_PER_JOB)")
        if self.remaining_s() <= 0:
            return "failed", self.wall_reason()
        if self.budget_turns >= self.max_turns and not self.router.is_precursor:
            return "failed", (f"turn budget exhausted: {self.max_turns} turns without a "
                              "verified kernel")
        return None

    def optimize_stop(self) -> bool:
        """The optimize phase ends on cancellation or a spent token/wall budget (not turns)."""
        stop = self.stop_reason()
        return stop is not None and not stop[1].startswith("turn budget")

    def begin_turn(self, *, precursor: bool | None = None) -> Turn:
        """A new turn: a precursor's (default: the router's cheaper backend) is turn 0 and
        uses no budget."""
        precursor = self.router.is_precursor if precursor is None else precursor
        return Turn(number=0 if precursor else self.budget_turns + 1, precursor=precursor,
                    started=time.monotonic())

    async def ask(self) -> ModelReply:
        """The current backend's reply, within what is left of the wall-clock budget."""
        return await asyncio.wait_for(self.router.current.turn(self.conversation),
                                      timeout=max(self.remaining_s(), 0.001))

    async def execute(self, reply: ModelReply) -> tuple[list[ToolOutcome], Message]:
        """Run the reply's tool calls (or its fenced code), building the next user message."""
        outcomes: list[ToolOutcome] = []
        results: list[ToolResult] = []
        for call in reply.tool_calls:
            if any(o.verified for o in outcomes):
                # The job is done; later calls of the same reply are not run (nor recorded).
                results.append(ToolResult(tool_call_id=call.id,
                                          content="skipped: a kernel verified"))
                continue
            outcome = await self.runner.run(call.name, call.arguments)
            outcome.arguments = call.arguments
            outcomes.append(outcome)
            self.consider(outcome)
            results.append(ToolResult(tool_call_id=call.id, content=outcome.content,
                                      is_error=outcome.is_error))
        text = ""
        if not reply.tool_calls:
            code = extract_code(reply.text)
            if code is None:
                text = NUDGE
            else:
                outcome = await self.runner.verify(code)
                outcome.arguments = {"code": code}
                outcomes.append(outcome)
                self.consider(outcome)
                text = ("(your code was verified as if you had called verify_kernel)\n"
                        + outcome.content)
        text = self._with_knowledge(outcomes, text)
        return outcomes, Message(role="user", text=text, tool_results=results)

    def _with_knowledge(self, outcomes: list[ToolOutcome], text: str) -> str:
        """Append a guide section about the turn's errors, once per section per job."""
        errors = " ".join(o.content for o in outcomes if o.is_error and o.code is not None)
        if not errors:
            return text
        found = knowledge.sections_for_error(errors, exclude=self.sent_sections)
        if not found:
            return text
        self.sent_sections.update(s.key for s in found)
        note = "Relevant NKI guide:\n" + "\n".join(s.render() for s in found)
        return f"{text}\n\n{note}" if text else note

    def finish_turn(self, turn: Turn, reply: ModelReply, outcomes: list[ToolOutcome],
                    error: str | None = None) -> TurnRecord:
        """Record the turn, count it against the budget, and report it to `on_turn`."""
        record = self._record(turn.number, reply, outcomes, time.monotonic() - turn.started,
                              error)
        self.transcript.append(record)
        if not turn.precursor:
            self.budget_turns += 1
        if self.on_turn is not None:
            try:
                self.on_turn(record)
            except Exception:  # progress reporting must never end a conversion
                log.warning("on_turn callback failed", turn=record.turn, exc_info=True)
        return record

    def _record(self, number: int, reply: ModelReply, outcomes: list[ToolOutcome],
                seconds: float, error: str | None = None) -> TurnRecord:
        kernels = [o for o in outcomes if o.code is not None]
        last = kernels[-1] if kernels else None
        verified = any(o.verified for o in kernels) if kernels else None
        calls = [o.record() for o in outcomes]
        failure = error or (None if verified or last is None else (
            feedback.result_summary(last.compile, last.verify)
            or feedback.summary(last.content)))
        return TurnRecord(
            turn=number, model=reply.model or self.router.current.name, text=reply.text,
            tool_calls=calls, compiled=None if last is None else bool(last.compiled),
            verified=verified, max_abs_error=None if last is None else last.max_abs_error,
            worst=(worst_error(last.verify.trials) or None) if last and last.verify else None,
            error=failure, tokens=reply.tokens, seconds=round(seconds, 3),
        )
