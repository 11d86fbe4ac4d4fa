"""The optimize phase: after the first verified kernel, a few turns asking for a faster one.

Each turn gives the model the kernel's time (measured p50 on hardware, else the cost
model's estimate, labelled) and the model's breakdown: bottleneck engine, utilisation per
engine, DMA efficiency, the heaviest instructions. Every candidate is costed first
(`costfirst`): only one the model ranks faster than the best so far is verified, the
lowering's variants fastest first. A new kernel is kept only if it verifies again and is
faster; the chain (turn, time, change, verified, kept) goes to the result, every candidate
in it, each skipped one with its modelled time and why.
"""

from __future__ import annotations

import asyncio

from nkibot.backends.base import KernelBackend
from nkibot.convert.agent.costfirst import Costs, ModelGate, Skipped, breakdown, modelled_us
from nkibot.convert.agent.session import Session
from nkibot.convert.agent.tools import ToolOutcome
from nkibot.convert.models.base import Message
from nkibot.results import OptimizeStep, ProfileResult
from nkibot.sim.cost.explain import why_faster


def timing(profile: ProfileResult) -> tuple[float, str] | None:
    """(µs, where it comes from): measured p50 on hardware, else the model's estimate."""
    lat = profile.kernel_device_time or profile.kernel
    if profile.hardware and lat is not None:
        return lat.p50_us, f"measured p50 on {profile.measured_on}"
    us = profile.model.get("time_us")
    if isinstance(us, int | float) and us > 0:
        return float(us), str(profile.model.get("label", "model estimate"))
    return None


def ask(time_us: float, source: str, profile: ProfileResult, last: str) -> str:
    return (f"{last}The kernel verified. Its time: {time_us:.1f} us ({source}). "
            f"{breakdown(profile)}\nMake it faster without changing its results: start your "
            "reply with one line `Change: <what you changed>`, then call `verify_kernel` "
            "with the complete kernel file. A kernel is kept only if it verifies and is faster; "
            "one the cost model ranks slower is not verified.")


async def _time(backend: KernelBackend, costs: Costs, code: str, state: Session
                ) -> tuple[float, str, ProfileResult] | None:
    """The time a kept kernel is compared on: measured on hardware, else the model's.

    Off hardware that is the cost-only estimate the gate already made (same inputs and
    model as a profile, no numerics run): the final profile runs once, after the phase.
    """
    try:
        profile = (await costs.of(code) if not backend.is_hardware
                   else await asyncio.to_thread(backend.profile, code, state.task))
    except Exception:  # no timing means no comparison: the candidate is not kept
        return None
    got = None if profile is None else timing(profile)
    return None if got is None or profile is None else (got[0], got[1], profile)


def _change(text: str) -> str:
    for line in text.splitlines():
        if line.strip().lower().startswith("change:"):
            return line.split(":", 1)[1].strip()[:120]
    return text.strip().splitlines()[0][:120] if text.strip() else ""


def _verified(outcomes: list[ToolOutcome]) -> ToolOutcome | None:
    return next((o for o in reversed(outcomes) if o.code is not None and o.verified), None)


def _skipped(outcomes: list[ToolOutcome]) -> Skipped | None:
    return next((o.skipped for o in reversed(outcomes) if o.skipped is not None), None)


async def _rank_variants(state: Session, costs: Costs) -> None:
    """Offer a deterministic backend's queued variants fastest first, by modelled time."""
    current = state.router.current
    queued = current.queued_variants
    if len(queued) > 1:
        current.reorder_variants(await costs.fastest_first(queued))


async def run(state: Session, backend: KernelBackend, turns: int) -> list[OptimizeStep]:
    """Up to `turns` optimize turns from the verified `state.best`; the chain they made."""
    if turns <= 0 or state.best is None or not state.best.verified or state.best.code is None:
        return []
    current = state.router.current
    deterministic = current.deterministic
    if deterministic and not current.variants_left:
        return []  # a deterministic backend with no other tiling would repeat itself
    costs = Costs(backend, state.task)
    timed = await _time(backend, costs, state.best.code, state)
    if timed is None:
        return []
    best_us, source, profile = timed
    chain = [OptimizeStep(turn=state.budget_turns, time_us=round(best_us, 3), source=source,
                          change="first verified kernel", verified=True, kept=True)]
    best_model = modelled_us(await costs.of(state.best.code))
    gate = None if best_model is None else ModelGate(costs, best_model)
    state.runner.gate = gate
    try:
        if gate is not None:
            await _rank_variants(state, costs)
        await _turns(state, backend, costs, gate, turns, deterministic, chain,
                     (best_us, source, profile))
    finally:
        state.runner.gate = None
    return chain


async def _turns(state: Session, backend: KernelBackend, costs: Costs, gate: ModelGate | None,
                 turns: int, deterministic: bool, chain: list[OptimizeStep],
                 best: tuple[float, str, ProfileResult]) -> None:
    """The phase's turns. A deterministic backend's skipped candidate costs no turn: it
    cost no tokens and no verification, and its queue of variants is finite."""
    best_us, source, profile = best
    note, spent = "", 0
    while spent < turns and not state.optimize_stop():
        _append_user(state, ask(best_us, source, profile, note))
        # Optimize turns are numbered and counted even when a precursor found the kernel.
        turn = state.begin_turn(precursor=False)
        try:
            reply = await state.ask()
        except Exception:  # the phase is optional: a failing model ends it, result kept
            break
        if reply.declined:  # nothing more to offer (e.g. the lowering's variants are spent)
            break
        state.tokens = state.tokens + reply.tokens
        state.conversation.messages.append(
            Message(role="assistant", text=reply.text, tool_calls=reply.tool_calls))
        kept_best = state.best
        outcomes, answer = await state.execute(reply)
        state.best = kept_best  # only a faster verified kernel replaces it, below
        state.conversation.messages.append(answer)
        state.finish_turn(turn, reply, outcomes)
        step, note, new = await _judge(state, backend, costs, outcomes, (best_us, profile),
                                       reply.text)
        chain.append(step)
        spent += 0 if deterministic and _skipped(outcomes) is not None else 1
        if new is not None:
            state.best, best_us, source, profile = new
            if gate is not None:
                gate.best_us = modelled_us(await costs.of(new[0].code or "")) or gate.best_us


async def _judge(state: Session, backend: KernelBackend, costs: Costs,
                 outcomes: list[ToolOutcome], best: tuple[float, ProfileResult], text: str
                 ) -> tuple[OptimizeStep, str, tuple[ToolOutcome, float, str,
                                                     ProfileResult] | None]:
    best_us, best_profile = best
    change, number = _change(text), state.budget_turns
    cand = _verified(outcomes)
    skipped = _skipped(outcomes)
    if cand is None and skipped is not None:
        label = str(skipped.profile.model.get("label", "model estimate"))
        return (OptimizeStep(turn=number, time_us=round(skipped.time_us, 3), source=label,
                             change=change, verified=None, reason=skipped.reason),
                f"Your last candidate was {skipped.reason}; the previous kernel stays. ", None)
    if cand is None or cand.code is None:
        why = "did not verify"
        return (OptimizeStep(turn=number, change=change, verified=False, reason=why),
                f"Your last candidate {why}; the previous kernel stays. ", None)
    timed = await _time(backend, costs, cand.code, state)
    if timed is None:
        return (OptimizeStep(turn=number, change=change, verified=True,
                             reason="could not be timed"),
                "Your last candidate could not be timed. ", None)
    us, source, profile = timed
    step = OptimizeStep(turn=number, time_us=round(us, 3), source=source, change=change,
                        verified=True)
    if us >= best_us:
        step.reason = f"not faster: {us:.1f} us vs {best_us:.1f} us"
        return step, f"Your last candidate verified but was {step.reason}. ", None
    step.kept = True
    if best_profile.model and profile.model:  # the model's own account of the gain
        step.reason = f"faster: {why_faster(best_profile.model, profile.model)}"
    return step, f"Your last candidate was kept ({best_us:.1f} -> {us:.1f} us). ", (
        cand, us, source, profile)


def _append_user(state: Session, text: str) -> None:
    """Add to the last user message (the tool results), keeping roles alternating."""
    messages = state.conversation.messages
    if messages and messages[-1].role == "user":
        last = messages[-1]
        messages[-1] = last.model_copy(update={"text": f"{last.text}\n\n{text}".strip()})
    else:
        messages.append(Message(role="user", text=text))
