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
from nkibot.convert.models.lowering_backend import LoweringBackend
from nkibot.convert.models.router import Router
from nkibot.lowering import Declined, Lowered, lower_task
from nkibot.lowering.plan import Variant
from nkibot.task import Task, describe_kernel_args
from nkibot.verify.reference import compute_reference
from tests.convert.agent.episode import Children
from tests.lowering.lowering_support import make_task, module_source, simulate

MATMUL = module_source("torch.matmul(x, y)", args="x, y")
SHAPES = [(256, 256), (256, 1024)]


def _tiling(source: str) -> str:
    """The tiling a kernel's comment names: "b-panel", "stream" or "blocked BMxBN"."""
    for line in source.splitlines():
        line = line.strip()
        if line.startswith("# tiling: "):
            return line.removeprefix("# tiling: ").split(" (")[0]
        if line.startswith("# blocked "):
            return line.removeprefix("# ").split(":")[0]
    raise AssertionError("no tiling comment")


def test_every_fitting_tiling_is_a_variant_with_the_same_results() -> None:
    """The blocked form's next block size and the panel form are variants; each is a
    different tiling from the kernel's and computes the same product on the simulator."""
    lowered = lower_task(make_task(MATMUL, SHAPES))
    assert isinstance(lowered, Lowered), lowered
    names = [v.name.removeprefix("matmul tiling ") for v in lowered.variants]
    assert len(names) == 2 and all(v.name.startswith("matmul tiling ") for v in lowered.variants)
    assert _tiling(lowered.source).startswith("blocked ")
    assert [_tiling(v.source) for v in lowered.variants] == names
    assert _tiling(lowered.source) not in names and "b-panel" in names
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in SHAPES)
    want = x @ y
    for variant in lowered.variants:
        assert "a variant, kept only if it verifies and is faster" in variant.source
    for source in (lowered.source, *(v.source for v in lowered.variants)):
        (got,) = simulate(source, lowered.function, [x, y])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


async def test_variants_are_offered_after_the_first_turn_then_it_declines() -> None:
    backend = LoweringBackend(lower=lower_task)
    conv = Conversation(task=make_task(MATMUL, SHAPES), system="")
    first = await backend.turn(conv)
    assert backend.variants_left == 2
    codes = {first.tool_calls[0].arguments["code"]}
    last = first
    for left in (1, 0):
        conv.messages += [Message(role="assistant", text=last.text, tool_calls=last.tool_calls),
                          Message(role="user", tool_results=[ToolResult(
                              tool_call_id=last.tool_calls[0].id, content="verified")])]
        last = await backend.turn(conv)
        assert last.text.startswith("Change: matmul tiling ")
        assert last.tool_calls[0].name == "verify_kernel"
        codes.add(last.tool_calls[0].arguments["code"])
        assert backend.variants_left == left
    assert len(codes) == 3
    third = await backend.turn(conv)
    assert third.declined is not None and third.tool_calls == []


MODEL = "model estimate (trn1), not a measurement"


async def _optimize(task: Task, lowering: LoweringBackend, children: Children) -> LoopOutcome:
    with compute_reference(task) as reference:
        return await run_loop(task, router=Router([lowering]), backend=SimBackend(
            runner=children), reference=reference, settings=Settings(),
            kernel_args=describe_kernel_args(task), optimize_turns=3)


async def test_a_tiling_modelled_slower_is_not_verified() -> None:
    """The lowering's pick (the blocked form) is modelled faster than both variants (the
    next block size, the panel form): each is costed, never compiled nor verified, and the
    chain says why, with both times."""
    task = make_task(MATMUL, SHAPES)
    children = Children()
    outcome = await _optimize(task, LoweringBackend(lower=lower_task), children)
    assert outcome.status == "verified" and outcome.tokens.total == 0
    first, *variants = outcome.optimize_chain
    assert first.change == "first verified kernel" and first.kept and first.verified
    assert first.time_us is not None and first.source == MODEL
    assert {v.change for v in variants} == {"matmul tiling b-panel",
                                            f"matmul tiling {_other_blocks(task)}"}
    for variant in variants:
        assert not variant.kept and variant.verified is None and variant.source == MODEL
        assert variant.time_us is not None and variant.time_us > first.time_us
        assert variant.reason == (f"not verified: modelled slower ({variant.time_us:.1f} µs "
                                  f"against {first.time_us:.1f} µs)")
    panel = next(src for op, src in children.ran if "tiling: b-panel" in src)
    assert children.ops(panel) == ["cost"]
    assert _tiling(outcome.best_source or "").startswith("blocked ")


def _other_blocks(task: Task) -> str:
    lowered = lower_task(task)
    assert isinstance(lowered, Lowered)
    return next(_tiling(v.source) for v in lowered.variants if "blocked" in v.name)


def _panel_first(task: Task) -> Lowered | Declined:
    """The lowering with its panel tiling as the first kernel, and as variants (slowest
    first) the panel kernel again under a new comment, then the blocked pick."""
    lowered = lower_task(task)
    assert isinstance(lowered, Lowered)
    panel = next(v.source for v in lowered.variants if v.name == "matmul tiling b-panel")
    return Lowered(panel, lowered.function, lowered.ops, [
        Variant("matmul tiling b-panel, annotated", "# the panel tiling again\n" + panel),
        Variant("matmul tiling blocked", lowered.source)])


async def test_a_tiling_modelled_faster_is_verified_first_and_kept() -> None:
    """Variants run fastest first: the blocked kernel (listed last) is modelled faster than
    the panel kernel, so it is verified (both determinism children) and kept; the annotated
    panel kernel is then modelled slower than the kept one, and is not verified."""
    task = make_task(MATMUL, SHAPES)
    children = Children()
    outcome = await _optimize(task, LoweringBackend(lower=_panel_first), children)
    assert outcome.status == "verified"
    first, blocked, again = outcome.optimize_chain
    assert blocked.change == "matmul tiling blocked" and blocked.verified and blocked.kept
    assert again.change == "matmul tiling b-panel, annotated"
    assert again.verified is None and not again.kept
    assert first.time_us is not None and blocked.time_us is not None
    assert blocked.time_us < first.time_us * 0.95
    assert again.reason == (f"not verified: modelled slower ({first.time_us:.1f} µs "
                            f"against {blocked.time_us:.1f} µs)")
    assert _tiling(outcome.best_source or "").startswith("blocked ")
    blocked_src = next(src for _, src in children.ran if "# blocked " in src)
    assert children.ops(blocked_src).count("verify") == 2
    (panel,) = [v.source for v in _panel_first(task).variants if "again" in v.source]
    assert children.ops(panel) == ["cost"]
