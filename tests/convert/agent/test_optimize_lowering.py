"""The lowering's tilings, chosen by modelled time: its first kernel is the proxy's pick,
and the optimize phase costs every other tiling that fits (cost model, real simulator
backend), verifies those modelled faster, fastest first, and keeps one only when it
verifies and is faster."""

from __future__ import annotations

import numpy as np

from nkibot.backends.sim import SimBackend
from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import LoopOutcome, run_loop
from nkibot.convert.models.base import Conversation, Message, ToolResult
from nkibot.convert.models.lowering import Declined, Lowered, LoweringBackend, lower_task
from nkibot.convert.models.lowering.plan import Variant
from nkibot.convert.models.router import Router
from nkibot.task import Task, describe_kernel_args
from nkibot.verify.reference import compute_reference
from tests.convert.agent.episode import Children
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


MODEL = "model estimate (trn1), not a measurement"


async def _optimize(task: Task, lowering: LoweringBackend, children: Children) -> LoopOutcome:
    with compute_reference(task) as reference:
        return await run_loop(task, router=Router([lowering]), backend=SimBackend(
            runner=children), reference=reference, settings=Settings(),
            kernel_args=describe_kernel_args(task), optimize_turns=3)


async def test_a_tiling_modelled_slower_is_not_verified() -> None:
    """The proxy's pick (b-panel) is modelled faster than its variant (stream): the variant
    is costed, never compiled nor verified, and the chain says why, with both times."""
    task = make_task(MATMUL, SHAPES)
    children = Children()
    outcome = await _optimize(task, LoweringBackend(lower=lower_task), children)
    assert outcome.status == "verified" and outcome.tokens.total == 0
    first, variant = outcome.optimize_chain
    assert first.change == "first verified kernel" and first.kept and first.verified
    assert variant.change == "matmul tiling stream" and not variant.kept
    assert variant.verified is None and first.time_us is not None
    assert variant.time_us is not None and variant.time_us > first.time_us
    assert variant.reason == (f"not verified: modelled slower ({variant.time_us:.1f} µs "
                              f"against {first.time_us:.1f} µs)")
    assert first.source == variant.source == MODEL
    stream = next(src for op, src in children.ran if "tiling: stream" in src)
    assert children.ops(stream) == ["cost"]
    assert "tiling: b-panel" in (outcome.best_source or "")


def _stream_first(task: Task) -> Lowered | Declined:
    """The lowering with its stream tiling as the first kernel, and as variants (slowest
    first) the stream kernel again under a new comment, then the proxy's b-panel pick."""
    lowered = lower_task(task)
    assert isinstance(lowered, Lowered) and len(lowered.variants) == 1
    stream = lowered.variants[0].source
    return Lowered(stream, lowered.function, lowered.ops, [
        Variant("matmul tiling stream, annotated", "# the stream tiling again\n" + stream),
        Variant("matmul tiling b-panel", lowered.source)])


async def test_a_tiling_modelled_faster_is_verified_first_and_kept() -> None:
    """Variants run fastest first: b-panel (listed last) is modelled faster than the stream
    kernel, so it is verified (both determinism children) and kept; the annotated stream
    kernel is then modelled slower than the kept one, and is not verified."""
    task = make_task(MATMUL, SHAPES)
    children = Children()
    outcome = await _optimize(task, LoweringBackend(lower=_stream_first), children)
    assert outcome.status == "verified"
    first, panel, again = outcome.optimize_chain
    assert panel.change == "matmul tiling b-panel" and panel.verified and panel.kept
    assert again.change == "matmul tiling stream, annotated"
    assert again.verified is None and not again.kept
    assert first.time_us is not None and panel.time_us is not None
    assert panel.time_us < first.time_us * 0.95
    assert again.reason == (f"not verified: modelled slower ({first.time_us:.1f} µs "
                            f"against {panel.time_us:.1f} µs)")
    assert "tiling: b-panel" in (outcome.best_source or "")
    panel_src = next(src for _, src in children.ran if "tiling: b-panel" in src)
    assert children.ops(panel_src).count("verify") == 2
    (stream,) = [v.source for v in _stream_first(task).variants if "again" in v.source]
    assert children.ops(stream) == ["cost"]

