"""convert(): backend, reference, loop and profile joined into one ConversionResult."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.convert.pipeline import ConvertOptions, convert, kernel_path
from nkibot.lowering.frontend.catalogue import hint
from nkibot.results import TurnRecord
from nkibot.task import InputSpec, Task
from tests.convert.agent.episode import GOOD, NUMERIC_BUG, SimTask, sim_task
from tests.fakes.anthropic import AnthropicDouble, tool_reply

__all__ = ["sim_task"]  # the fixture, used by name below


def _settings(double: AnthropicDouble | None = None) -> Settings:
    if double is None:
        return Settings(_env_file=None, anthropic_api_key=None)
    return Settings(_env_file=None, anthropic_api_key=SecretStr(double.api_key),
                    anthropic_base_url=double.base_url, anthropic_max_retries=0,
                    anthropic_model="claude-test")


@pytest.fixture(autouse=True)
def _no_sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "NKIBOT_ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


class TestConvert:
    async def test_verified_result_has_every_field(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask
    ) -> None:
        """A verified conversion reports backend, simulator, model, kernel, verify and profile."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": GOOD}))
        seen: list[TurnRecord] = []
        stages: list[str] = []
        result = await convert(sim_task.task, settings=_settings(anthropic_double),
                               options=ConvertOptions(model="claude", backend="sim",
                                                      on_turn=seen.append, on_stage=stages.append))
        assert result.status == "verified", result.reasons
        assert (result.backend, result.hardware) == ("sim", False)
        assert result.simulator and result.model == "claude (claude-test)"
        assert result.turns == 1 and seen == result.transcript
        assert result.kernel is not None and result.kernel.function == "model_kernel"
        assert result.kernel.source == GOOD and result.kernel.path == kernel_path(sim_task.task)
        assert [(a.source, a.index) for a in result.kernel.args] == [("input", 0)]
        assert result.verify is not None and result.verify.passed
        assert result.profile is not None and result.profile.hardware is False
        assert "not a latency measurement" in result.profile.measured_on
        # tanh * 2 has no FLOPs PyTorch counts: the roofline is the I/O bytes alone
        model = result.profile.model
        assert model["flops"] == 0.0 and model["roofline_bound"] == "memory"
        assert "operator" in model["roofline_basis"]
        assert stages == ["backend", "reference", "loop", "profile"]
        assert result.reasons == []

    async def test_unverified_keeps_best_kernel_and_reasons(
        self, anthropic_double: AnthropicDouble, sim_task: SimTask
    ) -> None:
        """Out of turns with a compiling kernel: status compiled, reasons say why."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": NUMERIC_BUG}))
        result = await convert(sim_task.task, settings=_settings(anthropic_double),
                               options=ConvertOptions(model="claude", backend="sim", turns=1))
        assert result.status == "compiled" and result.profile is None
        assert result.kernel is not None and result.kernel.source == NUMERIC_BUG
        assert result.reasons[0] == "the best kernel compiled but did not pass verification"
        assert "turn budget exhausted: 1 turns without a verified kernel" in result.reasons

    async def test_missing_key_is_a_failed_result(self, sim_task: SimTask) -> None:
        """--model claude without a key fails with the reason instead of raising."""
        result = await convert(sim_task.task, settings=_settings(),
                               options=ConvertOptions(model="claude", backend="sim"))
        assert result.status == "failed" and result.backend == "sim"
        assert "ANTHROPIC_API_KEY" in result.reasons[0]

    async def test_crashing_reference_is_a_failed_result(self) -> None:
        """A reference that raises becomes status failed with the reason, not an exception."""
        source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                  "        raise ValueError('boom in forward')\n")
        task = Task(reference_source=source, entry_point="Model", source_path="bad.py",
                    inputs=[InputSpec(name="x", shape=(8, 8))])
        result = await convert(task, settings=_settings(),
                               options=ConvertOptions(model="lowering", backend="sim"))
        assert result.status == "failed"
        assert result.reasons[0].startswith("the reference could not be run")
        assert "boom in forward" in result.reasons[0]

    async def test_cancelled_before_start(self, sim_task: SimTask) -> None:
        """A job cancelled before it starts never runs the reference or a model."""
        result = await convert(sim_task.task, settings=_settings(),
                               options=ConvertOptions(model="auto", backend="sim",
                                                      should_stop=lambda: True,
                                                      bedrock_available=False))
        assert result.status == "cancelled" and result.turns == 0


UNLOWERED_REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.erfinv(torch.tanh(x))


def get_inputs():
    return [torch.randn(1, 4, 8, 8)]


def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def unlowered_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """An erfinv module: the deterministic lowering declines it (no NKI erfinv)."""
    from nkibot.convert.taskload import load_task

    path = tmp_path_factory.mktemp("erfinv") / "erfinv.py"
    path.write_text(UNLOWERED_REFERENCE, encoding="utf-8")
    return load_task(path, "Model", display_path="erfinv.py")


class TestAutoRouting:
    async def test_lowering_verifies_a_supported_module(self, sim_task: SimTask) -> None:
        """auto with no credentials: the real lowering converts tanh*2 alone, zero tokens."""
        result = await convert(sim_task.task, settings=_settings(),
                               options=ConvertOptions(model="auto", backend="sim",
                                                      bedrock_available=False))
        assert result.status == "verified", result.reasons
        assert result.model == "lowering" and result.tokens.total == 0
        assert result.kernel is not None and result.kernel.function == "model_kernel"

    async def test_only_lowering_available_says_so(self, unlowered_task: Task) -> None:
        """When only the lowering can run and it declines, the result says so plainly."""
        result = await convert(unlowered_task, settings=_settings(),
                               options=ConvertOptions(model="auto", backend="sim",
                                                      bedrock_available=False))
        assert result.status == "declined" and result.kernel is None
        assert result.reasons[0].startswith(
            "only the deterministic lowering was available (no ANTHROPIC_API_KEY or AWS "
            "credentials); it declined: unsupported ops: aten.erfinv")

    async def test_lowering_only_decline_skips_the_reference(self, unlowered_task: Task
                                                             ) -> None:
        """A lowering-only chain that declines answers before the module runs its trials:
        no reference stage, one declined turn, the same reasons."""
        stages: list[str] = []
        turns: list[TurnRecord] = []
        result = await convert(unlowered_task, settings=_settings(),
                               options=ConvertOptions(model="lowering", backend="sim",
                                                      on_stage=stages.append, on_turn=turns.append))
        assert stages == ["backend"] and result.status == "declined"
        assert [(t.turn, t.model) for t in result.transcript] == [(1, "lowering")]
        assert turns == result.transcript and result.turns == 1
        (reason,) = result.reasons
        assert reason.startswith("the lowering backend declined: unsupported ops: "
                                 "aten.erfinv.default (torch.erfinv at ")  # the user's call
        assert reason.endswith("; " + hint())

    async def test_decline_escalates_to_claude(
        self, anthropic_double: AnthropicDouble, unlowered_task: Task
    ) -> None:
        """With a key, the lowering's decline is turn 0 and Claude starts from it."""
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": NUMERIC_BUG}))
        result = await convert(unlowered_task, settings=_settings(anthropic_double),
                               options=ConvertOptions(model="auto", backend="sim", turns=1,
                                                      bedrock_available=False))
        assert [(t.turn, t.model) for t in result.transcript] == [(0, "lowering"),
                                                                 (1, "claude-test")]
        assert result.transcript[0].error is not None
        assert result.transcript[0].error.startswith("declined: unsupported ops")
        assert result.model == "lowering -> claude (claude-test)"
        first = anthropic_double.requests[0].last_user_text()
        assert "The `lowering` backend tried first and produced no kernel: declined" in first
        assert result.status == "failed" and result.turns == 2


class TestKernelPath:
    def test_is_deterministic(self) -> None:
        """The kernel path derives from the module file and the entry point."""
        task = Task(reference_source="", entry_point="RMSNorm", source_path="examples/rmsnorm.py")
        assert kernel_path(task) == "nki_kernels/rmsnorm_rms_norm_nki.py"
        assert Path(kernel_path(task)).parent == Path("nki_kernels")


def test_options_are_one_frozen_value() -> None:
    """convert() takes the task, the settings and one frozen ConvertOptions, nothing more:
    the runner, the CLI and MCP build one value instead of spelling out every knob."""
    import dataclasses
    import inspect

    assert list(inspect.signature(convert).parameters) == ["task", "settings", "options"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ConvertOptions().model = "claude"  # type: ignore[misc]


async def test_the_reference_runs_once_for_all_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """One reference per conversion (issue 28, item 5): the first turn and every optimize
    turn (the lowering's other matmul tilings, each verified against the same trials)
    reuse the outputs the reference child computed once."""
    from nkibot.verify import reference as reference_module
    from tests.convert.agent.test_optimize_lowering import MATMUL, SHAPES
    from tests.lowering.lowering_support import make_task

    real, runs = reference_module.compute_reference, []

    def counted(*args: object, **kwargs: object) -> object:
        runs.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reference_module, "compute_reference", counted)
    stages: list[str] = []
    result = await convert(make_task(MATMUL, SHAPES), settings=_settings(),
                           options=ConvertOptions(model="lowering", backend="sim",
                                                  optimize_turns=3, on_stage=stages.append))
    assert result.status == "verified", result.reasons
    assert len(result.optimize_chain) >= 2  # the first kernel and at least one variant
    assert result.optimize_chain[0].verified  # the first kernel, against that reference
    assert len(runs) == 1 and stages.count("reference") == 1
