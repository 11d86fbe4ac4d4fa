"""The optimize phase, end to end: the real SDK against the Messages double, kernels costed,
verified and timed (cost model) by the real simulator backend in its sandboxed children."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nkibot.backends.sim import SimBackend
from nkibot.config.settings import Settings
from nkibot.convert.agent.loop import run_loop
from nkibot.convert.models.anthropic import AnthropicBackend
from nkibot.convert.models.router import Router
from tests.convert.agent.episode import GOOD, NUMERIC_BUG, Children, SimTask
from tests.fakes.anthropic import AnthropicDouble, text_reply, tool_reply

#: Verifies, but every iteration reuses one set of tiles: iterations serialise (WAR).
_LOOP = "    for i in nl.affine_range(N // P):\n"
_TILE = "        t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)\n"
SLOW = GOOD.replace(_LOOP + _TILE, _TILE[4:] + _LOOP)
#: SLOW again, as a new candidate (a different source, the same instructions).
SLOW_AGAIN = SLOW.replace("@nki.jit", "# one tile for every iteration\n@nki.jit")


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


def _text_of(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return "\n".join(b.get("text") or str(b.get("content", "")) for b in content)


async def test_candidates_are_costed_first_and_only_faster_ones_verified(
        anthropic_double: AnthropicDouble, sim_task: SimTask,
        claude_settings: Callable[..., Settings]) -> None:
    """SLOW verifies first. Then: a wrong kernel the model ranks faster (verified, fails), the
    fast kernel (verified, kept), and SLOW again, which the model ranks slower than the kept
    kernel: answered with its modelled time and profile, never compiled nor verified."""
    seen: list[str] = []

    def after_skip(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(_text_of(body))
        return text_reply("Nothing faster to offer.")

    anthropic_double.enqueue(
        tool_reply("verify_kernel", {"code": SLOW}),
        _asks_for_speed(tool_reply("verify_kernel", {"code": NUMERIC_BUG},
                                   text="Change: fresh tiles, and fold the scale")),
        _asks_for_speed(tool_reply("verify_kernel", {"code": GOOD},
                                   text="Change: fresh tiles per iteration so loads overlap"),
                        "did not verify"),
        _asks_for_speed(tool_reply("verify_kernel", {"code": SLOW_AGAIN},
                                   text="Change: one tile again"), "was kept"),
        after_skip,
    )
    children = Children()
    outcome = await _run(sim_task, SimBackend(runner=children), claude_settings(),
                         optimize_turns=4)
    assert outcome.status == "verified" and outcome.best_source == GOOD
    chain = outcome.optimize_chain
    assert [(s.verified, s.kept) for s in chain] == [
        (True, True), (False, False), (True, True), (None, False), (False, False)]
    first_us, kept_us, skipped_us = chain[0].time_us, chain[2].time_us, chain[3].time_us
    assert first_us is not None and kept_us is not None and kept_us < first_us
    assert chain[1].reason == "did not verify"
    # The skipped candidate: its modelled time (SLOW's, as the first kernel's) and why.
    assert skipped_us == first_us
    assert chain[3].reason == (f"not verified: modelled slower ({first_us:.1f} µs against "
                               f"{kept_us:.1f} µs)")
    assert chain[3].source == "model estimate (trn1), not a measurement"
    # Costed once, never compiled, never verified; the verified ones were costed first.
    assert children.ops(SLOW_AGAIN) == ["cost"]
    assert children.ops(NUMERIC_BUG)[:1] == ["cost"] and "verify" in children.ops(NUMERIC_BUG)
    assert children.ops(GOOD)[:1] == ["cost"] and children.ops(GOOD).count("verify") == 2
    # The model got the skip back in the loop, with the candidate's profile.
    assert "not verified: modelled slower" in seen[0] and "Bottleneck engine" in seen[0]
    assert "Its profile:" in seen[0]


async def test_a_slower_kernel_is_not_verified_and_zero_turns_is_off(
        anthropic_double: AnthropicDouble, sim_task: SimTask,
        claude_settings: Callable[..., Settings]) -> None:
    anthropic_double.enqueue(
        tool_reply("verify_kernel", {"code": GOOD}),
        _asks_for_speed(tool_reply("verify_kernel", {"code": SLOW}, text="Change: reuse")),
    )
    children = Children()
    outcome = await _run(sim_task, SimBackend(runner=children), claude_settings(),
                         optimize_turns=1)
    assert outcome.best_source == GOOD
    assert [s.kept for s in outcome.optimize_chain] == [True, False]
    assert outcome.optimize_chain[1].reason.startswith("not verified: modelled slower (")
    assert children.ops(SLOW) == ["cost"]
    anthropic_double.enqueue(tool_reply("verify_kernel", {"code": SLOW}))
    off = await _run(sim_task, SimBackend(), claude_settings(), optimize_turns=0)
    assert off.best_source == SLOW and off.optimize_chain == []


#: tanh(x) * 2 over rows of 12288 floats: one [128, 12288] fp32 tile is 48 KiB a partition.
_WIDE_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs():
    return [torch.randn(256, 12288)]


def get_init_inputs():
    return []
'''

_CHUNKED = '''import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def model_kernel(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    W = D // CHUNKS
    for i in nl.affine_range(N // P):
        for c in nl.affine_range(CHUNKS):
            t = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * P:(i + 1) * P, c * W:(c + 1) * W])
            a = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=a, op=nl.tanh, data=t)
            y = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=y, data=a, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out[i * P:(i + 1) * P, c * W:(c + 1) * W], src=y)
    return out
'''
#: Whole rows: two buffers of its three 48 KiB tiles would not fit SBUF (192 KiB), so the
#: model leaves a tile single-buffered and iterations serialise.
WIDE_WHOLE = _CHUNKED.replace("CHUNKS", "1")
#: Half rows: twice the instructions, and every tile double-buffered.
WIDE_HALVES = _CHUNKED.replace("CHUNKS", "2")


@pytest.fixture(scope="module")
def wide_task(tmp_path_factory: pytest.TempPathFactory) -> SimTask:
    from nkibot.convert.taskload import load_task
    from nkibot.task import describe_kernel_args
    from nkibot.verify.reference import compute_reference

    path = tmp_path_factory.mktemp("wide") / "wide.py"
    path.write_text(_WIDE_REFERENCE, encoding="utf-8")
    task = load_task(path, "Model", turns=4, display_path="wide.py")
    return SimTask(task, compute_reference(task), describe_kernel_args(task), path)


async def test_the_kernel_that_fits_two_buffers_is_kept_despite_more_instructions(
        anthropic_double: AnthropicDouble, wide_task: SimTask, sim_backend: Any,
        claude_settings: Callable[..., Settings]) -> None:
    """Issue 27: the model sees capacity. Whole rows are fewer, larger instructions, but
    their tiles cannot be double-buffered; the half-row kernel overlaps loads, compute and
    stores. The loop keeps it and says why, in the model's terms."""
    anthropic_double.enqueue(
        tool_reply("verify_kernel", {"code": WIDE_WHOLE}),
        _asks_for_speed(tool_reply("verify_kernel", {"code": WIDE_HALVES},
                                   text="Change: half rows, so tiles double-buffer"),
                        "Single-buffered"),
    )
    outcome = await _run(wide_task, sim_backend, claude_settings(), optimize_turns=1)
    assert outcome.status == "verified"
    assert outcome.best_source == WIDE_HALVES
    first, second = outcome.optimize_chain
    assert first.kept and second.kept
    assert second.time_us is not None and first.time_us is not None
    assert second.time_us < first.time_us
    assert "single-buffered tiles 1 -> 0" in second.reason
