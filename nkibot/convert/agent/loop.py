"""The compile-verify-fix loop: ask a model, run its tool calls, feed results back.

Stops at the first verified kernel, on cancellation (checked at turn boundaries), when
the turn, token or wall-clock budget is spent, or when the router has no backend left.
Every turn becomes a TurnRecord, handed to `on_turn` as soon as it is complete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from nkibot.backends.base import KernelBackend
from nkibot.config.settings import Settings
from nkibot.convert.agent import feedback, knowledge, prompts
from nkibot.convert.agent.tools import ToolOutcome, ToolRunner, extract_code
from nkibot.convert.models.base import Conversation, Message, ModelReply, ToolResult
from nkibot.convert.models.router import Router
from nkibot.logging import scrub
from nkibot.results import (
    CompileResult,
    KernelArg,
    OptimizeStep,
    Status,
    TokenUsage,
    TurnRecord,
    VerifyResult,
)
from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet

log = structlog.get_logger(__name__)

NUDGE = ("No kernel found in your reply. Call `verify_kernel` with the complete kernel file "
         "(or put it in a ```python block).")


@dataclass
class LoopOutcome:
    status: Status
    transcript: list[TurnRecord] = field(default_factory=list)
    best_source: str | None = None
    compile: CompileResult | None = None
    verify: VerifyResult | None = None
    tokens: TokenUsage = field(default_factory=TokenUsage)
    reasons: list[str] = field(default_factory=list)
    models: str = ""
    seconds: float = 0.0
    optimize_chain: list[OptimizeStep] = field(default_factory=list)


@dataclass
class _State:
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


def _rank(o: ToolOutcome) -> tuple[int, float]:
    if o.verified:
        return (3, 0.0)
    if o.compiled and o.max_abs_error is not None:
        return (2, -o.max_abs_error)
    return (1 if o.compiled else 0, 0.0)


def _stop_reason(state: _State) -> tuple[Status, str] | None:
    if state.should_stop is not None and state.should_stop():
        return "cancelled", "cancelled at a turn boundary"
    used = state.tokens.total
    if used >= state.settings.max_tokens_per_job:
        return "failed", (f"token budget exhausted: {used} of {state.settings.max_tokens_per_job}"
                          " tokens used (NKIBOT_MAX_TOKENS_PER_JOB)")
    if state.remaining_s() <= 0:
        return "failed", _wall_reason(state)
    if state.budget_turns >= state.max_turns and not state.router.is_precursor:
        return "failed", f"turn budget exhausted: {state.max_turns} turns without a verified kernel"
    return None


def optimize_stop(state: _State) -> bool:
    """The optimize phase ends on cancellation or a spent token/wall budget (not turns)."""
    stop = _stop_reason(state)
    return stop is not None and not stop[1].startswith("turn budget")


def _wall_reason(state: _State) -> str:
    return (f"wall-clock budget exhausted: {state.settings.max_wall_s_per_job:g} s "
            "(NKIBOT_MAX_WALL_S_PER_JOB)")


async def _execute(state: _State, reply: ModelReply) -> tuple[list[ToolOutcome], Message]:
    """Run the reply's tool calls (or its fenced code), building the next user message."""
    outcomes: list[ToolOutcome] = []
    results: list[ToolResult] = []
    for call in reply.tool_calls:
        if any(o.verified for o in outcomes):
            # The job is done; later calls of the same reply are not run (nor recorded).
            results.append(ToolResult(tool_call_id=call.id, content="skipped: a kernel verified"))
            continue
        outcome = await state.runner.run(call.name, call.arguments)
        outcome.arguments = call.arguments
        outcomes.append(outcome)
        state.consider(outcome)
        results.append(ToolResult(tool_call_id=call.id, content=outcome.content,
                                  is_error=outcome.is_error))
    text = ""
    if not reply.tool_calls:
        code = extract_code(reply.text)
        if code is None:
            text = NUDGE
        else:
            outcome = await state.runner.verify(code)
            outcome.arguments = {"code": code}
            outcomes.append(outcome)
            state.consider(outcome)
            text = "(your code was verified as if you had called verify_kernel)\n" + outcome.content
    text = _with_knowledge(state, outcomes, text)
    return outcomes, Message(role="user", text=text, tool_results=results)


def _with_knowledge(state: _State, outcomes: list[ToolOutcome], text: str) -> str:
    """Append a guide section about the turn's errors, once per section per job."""
    errors = " ".join(o.content for o in outcomes if o.is_error and o.code is not None)
    if not errors:
        return text
    found = knowledge.sections_for_error(errors, exclude=state.sent_sections)
    if not found:
        return text
    state.sent_sections.update(s.key for s in found)
    note = "Relevant NKI guide:\n" + "\n".join(s.render() for s in found)
    return f"{text}\n\n{note}" if text else note


def _record(state: _State, number: int, reply: ModelReply, outcomes: list[ToolOutcome],
            seconds: float, error: str | None = None) -> TurnRecord:
    kernels = [o for o in outcomes if o.code is not None]
    last = kernels[-1] if kernels else None
    verified = any(o.verified for o in kernels) if kernels else None
    calls = [o.record() for o in outcomes]
    failure = error or (None if verified or last is None else (
        feedback.result_summary(last.compile, last.verify) or feedback.summary(last.content)))
    return TurnRecord(
        turn=number, model=reply.model or state.router.current.name, text=reply.text,
        tool_calls=calls, compiled=None if last is None else bool(last.compiled),
        verified=verified, max_abs_error=None if last is None else last.max_abs_error,
        error=failure, tokens=reply.tokens, seconds=round(seconds, 3),
    )


def _escalate(state: _State) -> None:
    """Start the next backend's conversation, carrying the last kernel and its failure."""
    last = state.last_kernel
    note = state.conversation.last_feedback or "it produced no kernel"
    previous = state.router.history[-2] if len(state.router.history) > 1 else "previous"
    carried = prompts.carried_attempt(previous, last.code if last else None, note)
    state.conversation = Conversation(
        task=state.task, system=state.conversation.system, last_feedback=note,
        messages=[Message(role="user", text=prompts.initial_user_message(state.task, carried))],
    )


async def _ask(state: _State) -> ModelReply:
    return await asyncio.wait_for(state.router.current.turn(state.conversation),
                                  timeout=max(state.remaining_s(), 0.001))


async def run_loop(
    task: Task,
    *,
    router: Router,
    backend: KernelBackend,
    reference: ReferenceSet,
    settings: Settings,
    on_turn: Callable[[TurnRecord], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    kernel_args: list[KernelArg] | None = None,
    max_turns: int | None = None,
    optimize_turns: int = 0,
) -> LoopOutcome:
    """Run the compile-verify-fix loop for one task until verified or out of budget.

    With `optimize_turns`, the first verified kernel is followed by up to that many turns
    asking for a faster one (see optimize.py); the fastest verified kernel is the result.
    """
    args = kernel_args or []
    system = prompts.system_prompt(task, args)
    state = _State(
        task=task, router=router, runner=ToolRunner(backend, task, reference), settings=settings,
        max_turns=max_turns or task.max_turns, started=time.monotonic(),
        conversation=Conversation(task=task, system=system, messages=[
            Message(role="user", text=prompts.initial_user_message(task))]),
        on_turn=on_turn, should_stop=should_stop,
    )
    status, reasons = await _turns(state)
    chain: list[OptimizeStep] = []
    if status == "verified" and optimize_turns > 0:
        from nkibot.convert.agent import optimize

        chain = await optimize.run(state, backend, optimize_turns)
    best = state.best
    if status not in ("cancelled", "declined") and best is not None and not best.verified:
        status = "compiled" if best.compiled else status
    return LoopOutcome(
        status=status, transcript=state.transcript, tokens=state.tokens, reasons=reasons,
        best_source=best.code if best else None, compile=best.compile if best else None,
        verify=best.verify if best else None, models=router.models_used(),
        seconds=round(time.monotonic() - state.started, 3), optimize_chain=chain,
    )


async def _turns(state: _State) -> tuple[Status, list[str]]:
    while True:
        stop = _stop_reason(state)
        if stop is not None:
            return stop[0], [stop[1]]
        ended = await _one_turn(state)
        if ended is not None:
            return ended


async def _one_turn(state: _State) -> tuple[Status, list[str]] | None:
    """One model turn and its tools; returns the loop's end when this turn ends it."""
    turn = _Turn(number=0 if state.router.is_precursor else state.budget_turns + 1,
                 precursor=state.router.is_precursor, started=time.monotonic())
    try:
        reply = await _ask(state)
    except TimeoutError:
        return "failed", [_wall_reason(state)]
    except Exception as exc:  # any SDK/transport failure becomes a failed turn
        error = scrub(f"model backend {state.router.current.name} failed: {exc}")
        _finish_turn(state, turn, ModelReply(model=state.router.current.name), [], error)
        return _after_failure(state, "failed", error, broken=True)
    state.tokens = state.tokens + reply.tokens
    if reply.declined:
        what = f"declined: {reply.declined}"
        _finish_turn(state, turn, reply, [], what)
        state.conversation.last_feedback = what
        return _after_failure(state, "declined", what, declined=True)
    state.conversation.messages.append(
        Message(role="assistant", text=reply.text, tool_calls=reply.tool_calls))
    outcomes, answer = await _execute(state, reply)
    state.conversation.messages.append(answer)
    record = _finish_turn(state, turn, reply, outcomes)
    if record.verified:
        return "verified", []
    kernel_feedback = [o.content for o in outcomes if o.code is not None]
    if kernel_feedback:
        state.conversation.last_feedback = kernel_feedback[-1]
    return _after_failure(state, "failed", "failed: " + (record.error or "no kernel verified"))


def _after_failure(state: _State, status: Status, what: str, *, broken: bool = False,
                   declined: bool = False) -> tuple[Status, list[str]] | None:
    """Ask the router what follows a failed turn: go on, escalate, or stop with a reason."""
    decision = state.router.after_turn(verified=False, broken=broken, declined=declined)
    if decision == "stop":
        return status, [what if broken else state.router.exhausted_reason(what)]
    if decision == "escalate":
        _escalate(state)
    return None


@dataclass(frozen=True)
class _Turn:
    number: int
    precursor: bool
    started: float


def _finish_turn(state: _State, turn: _Turn, reply: ModelReply, outcomes: list[ToolOutcome],
                 error: str | None = None) -> TurnRecord:
    record = _record(state, turn.number, reply, outcomes, time.monotonic() - turn.started,
                     error)
    state.transcript.append(record)
    if not turn.precursor:
        state.budget_turns += 1
    if state.on_turn is not None:
        try:
            state.on_turn(record)
        except Exception:  # progress reporting must never end a conversion
            log.warning("on_turn callback failed", turn=record.turn, exc_info=True)
    return record
