"""The lowering's tilings, chosen by modelled time: its first kernel is the proxy's pick,
and the optimize phase verifies and times every other tiling that fits (cost model, real
simulator backend), keeping one only when it verifies and is faster."""

from __future__ import annotations

import numpy as np

from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import run_loop
from nkibot.convert.models.base import Conversation, Message, ToolResult
from nkibot.convert.models.lowering import Lowered, LoweringBackend, lower_task
from nkibot.convert.models.router import Router
from tests.convert.models.lowering.lowering_support import make_task, module_source, simulate

MATMUL = module_source("torch.matmul(x, y)", args="x, y")
SHAPES = [(256, 256), (256, 1024)]


def test_every_fitting_tiling_is_a_variant_with_the_same_results() -> None:
    """Both matmul tilings fit: one is the kernel, the other a variant, and both compute
    the same product on the simulator."""
    lowered = lower_task(make_task(MATMUL, SHAPES))
    assert isinstance(lowered, Lowered), lowered
    (variant,) = lowered.variants
    assert variant.name.startswith("matmul tiling ")
    picked = "b-panel" if "tiling: b-panel" in lowered.source else "stream"
    assert variant.name.removeprefix("matmul tiling ") != picked
    assert "a variant, kept only if it verifies and is faster" in variant.source
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in SHAPES)
    want = x @ y
    for source in (lowered.source, variant.source):
        (got,) = simulate(source, lowered.function, [x, y])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


async def test_variants_are_offered_after_the_first_turn_then_it_declines() -> None:
    backend = LoweringBackend(lower=lower_task)
    conv = Conversation(task=make_task(MATMUL, SHAPES), system="")
    first = await backend.turn(conv)
    assert backend.variants_left == 1
    conv.messages += [Message(role="assistant", text=first.text, tool_calls=first.tool_calls),
                      Message(role="user", tool_results=[ToolResult(
                          tool_call_id=first.tool_calls[0].id, content="verified")])]
    second = await backend.turn(conv)
    assert second.text.startswith("Change: matmul tiling ")
    code = second.tool_calls[0].arguments["code"]
    assert second.tool_calls[0].name == "verify_kernel" and code != first.tool_calls[0].arguments[
        "code"]
    assert backend.variants_left == 0
    third = await backend.turn(conv)
    assert third.declined is not None and third.tool_calls == []


async def test_the_optimize_phase_keeps_the_faster_tiling() -> None:
    """End to end: the lowering's kernel, then its variant verified and timed by the
    cost model; the result is whichever is faster, and the chain says so."""
    from nkibot.backends.sim import SimBackend
    from nkibot.task import describe_kernel_args
    from nkibot.verify.reference import compute_reference

    task = make_task(MATMUL, SHAPES)
    router = Router([LoweringBackend(lower=lower_task)])
    outcome = await run_loop(task, router=router, backend=SimBackend(),
                             reference=compute_reference(task), settings=Settings(),
                             kernel_args=describe_kernel_args(task), optimize_turns=3)
    assert outcome.status == "verified" and outcome.tokens.total == 0
    chain = outcome.optimize_chain
    assert len(chain) == 2, chain  # one variant: the phase stops when the lowering declines
    assert chain[0].change == "first verified kernel"
    assert chain[1].change.startswith("matmul tiling ")
    first_us, variant_us = chain[0].time_us, chain[1].time_us
    assert first_us is not None and variant_us is not None
    assert all(s.source == "model estimate (trn1), not a measurement" for s in chain)
    assert chain[1].kept == (variant_us < first_us)
    tiling = chain[1].change.removeprefix("matmul tiling ")
    assert (f"tiling: {tiling}" in (outcome.best_source or "")) == chain[1].kept
