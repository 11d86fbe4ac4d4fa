"""The compile-verify-fix loop: ask a model, run its tool calls, feed results back.

Stops at the first verified kernel, on cancellation (checked at turn boundaries), when
the turn, token or wall-clock budget is spent, or when the router has no backend left.
Every turn becomes a TurnRecord, handed to `on_turn` as soon as it is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nkibot.backends.base import KernelBackend
from nkibot.config.settings import Settings
from nkibot.convert.agent import optimize, prompts
from nkibot.convert.agent.session import Session
from nkibot.convert.agent.tools import ToolRunner
from nkibot.convert.models.base import Conversation, Message, ModelReply
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


def _escalate(state: Session) -> None:
    """Start the next backend's conversation, carrying the last kernel and its failure."""
    last = state.last_kernel
    note = state.conversation.last_feedback or "it produced no kernel"
    previous = state.router.history[-2] if len(state.router.history) > 1 else "previous"
    carried = prompts.carried_attempt(previous, last.code if last else None, note)
    state.conversation = Conversation(
        task=state.task, system=state.conversation.system, last_feedback=note,
        messages=[Message(role="user", text=prompts.initial_user_message(state.task, carried))],
    )


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
    state = Session(
        task=task, router=router, runner=ToolRunner(backend, task, reference), settings=settings,
        max_turns=max_turns or task.max_turns, started=time.monotonic(),
        conversation=Conversation(task=task, system=system, messages=[
            Message(role="user", text=prompts.initial_user_message(task))]),
        on_turn=on_turn, should_stop=should_stop,
    )
    status, reasons = await _turns(state)
    chain: list[OptimizeStep] = []
    if status == "verified" and optimize_turns > 0:
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


async def _turns(state: Session) -> tuple[Status, list[str]]:
    while True:
        stop = state.stop_reason()
        if stop is not None:
            return stop[0], [stop[1]]
        ended = await _one_turn(state)
        if ended is not None:
            return ended


async def _one_turn(state: Session) -> tuple[Status, list[str]] | None:
    """One model turn and its tools; returns the loop's end when this turn ends it."""
    turn = state.begin_turn()
    try:
        reply = await state.ask()
    except TimeoutError:
        return "failed", [state.wall_reason()]
    except Exception as exc:  # any SDK/transport failure becomes a failed turn
        error = scrub(f"model backend {state.router.current.name} failed: {exc}")
        state.finish_turn(turn, ModelReply(model=state.router.current.name), [], error)
        return _after_failure(state, "failed", error, broken=True)
    state.tokens = state.tokens + reply.tokens
    if reply.declined:
        what = f"declined: {reply.declined}"
        state.finish_turn(turn, reply, [], what)
        state.conversation.last_feedback = what
        return _after_failure(state, "declined", what, declined=True)
    state.conversation.messages.append(
        Message(role="assistant", text=reply.text, tool_calls=reply.tool_calls))
    outcomes, answer = await state.execute(reply)
    state.conversation.messages.append(answer)
    record = state.finish_turn(turn, reply, outcomes)
    if record.verified:
        return "verified", []
    kernel_feedback = [o.content for o in outcomes if o.code is not None]
    if kernel_feedback:
        state.conversation.last_feedback = kernel_feedback[-1]
    return _after_failure(state, "failed", "failed: " + (record.error or "no kernel verified"))


def _after_failure(state: Session, status: Status, what: str, *, broken: bool = False,
                   declined: bool = False) -> tuple[Status, list[str]] | None:
    """Ask the router what follows a failed turn: go on, escalate, or stop with a reason."""
    decision = state.router.after_turn(verified=False, broken=broken, declined=declined)
    if decision == "stop":
        return status, [what if broken else state.router.exhausted_reason(what)]
    if decision == "escalate":
        _escalate(state)
    return None
