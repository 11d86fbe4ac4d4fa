"""The optimize phase, end to end: the real SDK against the Messages double, kernels verified
and timed (cost model) by the real simulator backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import run_loop
from nkibot.convert.models.anthropic import AnthropicBackend
from nkibot.convert.models.router import Router
from tests.convert.agent.episode import GOOD, NUMERIC_BUG, SimTask
from tests.fakes.anthropic import AnthropicDouble, tool_reply

#: Verifies, but every iteration reuses one set of tiles: iterations serialise (WAR).
SLOW = GOOD.replace('''    for i in nl.affine_range(N // P):
        t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)''', '''    t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(N // P):''')


def _asks_for_speed(reply: dict[str, Any], *fragments: str) -> Callable[[dict[str, Any]], Any]:
    def check(body: dict[str, Any]) -> dict[str, Any]:
        content = body["messages"][-1]["content"]
        text = "\n".join(b.get("text") or str(b.get("content", "")) for b in content)
        for fragment in ("Make it faster", "model estimate (trn1), not a measurement",
                         "Bottleneck engine", *fragments):
            assert fragment in text, f"{fragment!r} not in:\n{text}"
        return reply

    return check


async def _run(sim_task: SimTask, backend: Any, settings: Settings, **kw: Any) -> Any:
    router = Router([AnthropicBackend(settings)])
    try:
        return await run_loop(sim_task.task, router=router, backend=backend,
                              reference=sim_task.reference, settings=settings,
                              kernel_args=sim_task.args, **kw)
    finally:
        await router.aclose()


async def test_slow_then_faster_then_wrong_publishes_the_faster(
        anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]) -> None:
    assert SLOW != GOOD
    anthropic_double.enqueue(
        tool_reply("verify_kernel", {"code": SLOW}),
        _asks_for_speed(tool_reply("verify_kernel", {"code": GOOD},
                                   text="Change: fresh tiles per iteration so loads overlap")),
        _asks_for_speed(tool_reply("verify_kernel", {"code": NUMERIC_BUG},
                                   text="Change: fold the scale"), "was kept"),
    )
    outcome = await _run(sim_task, sim_backend, claude_settings(), optimize_turns=2)
    assert outcome.status == "verified"
    assert outcome.best_source == GOOD  # the second kernel: verified and faster
    chain = outcome.optimize_chain
    assert [s.kept for s in chain] == [True, True, False]
    assert chain[0].change == "first verified kernel"
    assert chain[1].change == "fresh tiles per iteration so loads overlap"
    assert chain[0].time_us is not None and chain[1].time_us is not None
    assert chain[1].time_us < chain[0].time_us
    assert chain[2].reason == "did not verify" and chain[2].time_us is None
    assert all(s.source == "model estimate (trn1), not a measurement" for s in chain[:2])
    assert [t.turn for t in outcome.transcript] == [1, 2, 3]
    assert len(anthropic_double.requests) == 3


async def test_a_slower_kernel_is_not_kept_and_zero_turns_is_off(
        anthropic_double: AnthropicDouble, sim_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]) -> None:
    anthropic_double.enqueue(
        tool_reply("verify_kernel", {"code": GOOD}),
        _asks_for_speed(tool_reply("verify_kernel", {"code": SLOW}, text="Change: reuse")),
    )
    outcome = await _run(sim_task, sim_backend, claude_settings(), optimize_turns=1)
    assert outcome.best_source == GOOD
    assert [s.kept for s in outcome.optimize_chain] == [True, False]
    assert outcome.optimize_chain[1].reason.startswith("not faster")
    anthropic_double.enqueue(tool_reply("verify_kernel", {"code": SLOW}))
    off = await _run(sim_task, sim_backend, claude_settings(), optimize_turns=0)
    assert off.best_source == SLOW and off.optimize_chain == []
