"""One conversion, end to end: backend, reference, loop, profile, result.

Used by `nkibot convert` and by the runner's workers. It never raises for failures a
user can cause (a reference that crashes, a model that is not configured, a kernel
that never verifies): those become `status="failed"` (or declined/cancelled) with
plain-words reasons in the result.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nkibot.backends.base import KernelBackend
from nkibot.config.settings import Settings
from nkibot.convert import requirements
from nkibot.convert.agent.loop import LoopOutcome, run_loop
from nkibot.convert.agent.prompts import kernel_function_name, snake_case
from nkibot.convert.agent.tools import kernel_function
from nkibot.convert.models.router import Router, RouterError, make_router
from nkibot.redact import redact_model
from nkibot.results import (
    ConversionResult,
    KernelArg,
    KernelInfo,
    ProfileResult,
    Status,
    TurnRecord,
)
from nkibot.task import Task

#: Optimize-phase turns when neither the repo config nor the command sets them.
DEFAULT_OPTIMIZE_TURNS = 3

Stage = Callable[[str], None]


def kernel_path(task: Task) -> str:
    """Where the kernel file goes, relative to the output directory or repository."""
    stem = re.sub(r"\W+", "_", Path(task.source_path).stem).strip("_") or "module"
    return f"nki_kernels/{stem}_{snake_case(task.entry_point)}_nki.py"


def _failed(task: Task, target: str, started: float, reason: str, *, backend: str = "none",
            hardware: bool = False, model: str = "none", status: Status = "failed",
            platform: str = "trn1") -> ConversionResult:
    return ConversionResult(status=status, target=target, backend=backend, hardware=hardware,
                            model=model, seconds=round(time.monotonic() - started, 3),
                            reasons=[reason], platform=platform)


@dataclass(frozen=True)
class ConvertOptions:
    """Everything one conversion may be told besides the task and the settings.

    `model`/`backend` name the chain and the kernel backend (auto|sim|neuron); `turns` caps
    the loop (default: the task's); `target` is the name the result carries; `core_id`
    pins the neuron backend's children to one NeuronCore (one runner worker each);
    `platform` is the Trainium generation (trn1/trn2/trn3) the kernel is checked for.
    `on_turn`, `should_stop` and `on_stage` are the caller's progress and cancellation.
    """

    model: str = "auto"
    backend: str = "auto"
    turns: int | None = None
    target: str | None = None
    platform: str = "trn1"
    core_id: int | None = None
    bedrock_available: bool | None = None
    optimize_turns: int | None = None
    min_speedup: float | None = None
    min_roofline_fraction: float | None = None
    on_turn: Callable[[TurnRecord], None] | None = None
    should_stop: Callable[[], bool] | None = None
    on_stage: Stage | None = None


async def convert(task: Task, *, settings: Settings,
                  options: ConvertOptions = ConvertOptions()) -> ConversionResult:
    """Convert one task; see the module docstring for the failure contract.

    The result names the generation it was checked for (`options.platform`, or on
    hardware the device's own).
    """
    from nkibot.backends.select import select_backend

    o = options
    started = time.monotonic()
    name = o.target or f"{task.source_path}::{task.entry_point}"
    stage = o.on_stage or (lambda _s: None)
    stage("backend")
    if o.backend not in ("auto", "sim", "neuron"):
        return _failed(task, name, started, f"unknown backend {o.backend!r}: use auto, sim or "
                       "neuron", platform=o.platform)
    try:
        kb: KernelBackend = select_backend(
            o.backend, core_id=o.core_id,  # type: ignore[arg-type]
            compile_timeout_s=settings.compile_timeout_s, platform=o.platform)
    except Exception as exc:  # a missing device or SDK is a user-level failure
        return _failed(task, name, started, f"kernel backend {o.backend!r} unavailable: {exc}",
                       platform=o.platform)
    # Every result names the generation it was checked for; both backends carry it (on
    # hardware it is the device's own).
    checked = kb.platform
    try:
        router = make_router(o.model, settings, o.bedrock_available)
    except RouterError as exc:
        return _failed(task, name, started, str(exc), backend=kb.name, hardware=kb.is_hardware,
                       platform=checked)
    try:
        result = await _run(task, name, kb, router, started, stage, settings=settings,
                            turns=o.turns, on_turn=o.on_turn, should_stop=o.should_stop,
                            optimize_turns=DEFAULT_OPTIMIZE_TURNS if o.optimize_turns is None
                            else o.optimize_turns)
    finally:
        await router.aclose()
    result = result.model_copy(update={"platform": checked})
    if result.status == "verified":
        result.requirements = requirements.check(result.profile, result.hardware, o.min_speedup,
                                                 o.min_roofline_fraction)
    # The verdict carries user code's exception text: no secret in it leaves verbatim.
    return redact_model(result)


async def _run(task: Task, name: str, kb: KernelBackend, router: Router, started: float,
               stage: Stage, *, settings: Settings, turns: int | None,
               on_turn: Callable[[TurnRecord], None] | None,
               should_stop: Callable[[], bool] | None,
               optimize_turns: int = 0) -> ConversionResult:
    from nkibot.task import describe_kernel_args
    from nkibot.verify.reference import compute_reference

    if should_stop is not None and should_stop():
        return _failed(task, name, started, "cancelled before the conversion started",
                       backend=kb.name, hardware=kb.is_hardware, status="cancelled")
    declined = await _preflight(router, task, on_turn)
    if declined is not None:
        return ConversionResult(
            status="declined", target=name, backend=kb.name, hardware=kb.is_hardware,
            simulator=None if kb.is_hardware else kb.name, model=router.models_used(),
            turns=1, seconds=round(time.monotonic() - started, 3), transcript=[declined],
            reasons=[router.exhausted_reason(declined.error or "declined")])
    stage("reference")
    try:
        reference = await asyncio.to_thread(
            compute_reference, task, timeout_s=task.compile_timeout_s)
        args = describe_kernel_args(task)
    except Exception as exc:  # the user's module failed to run: say so, don't crash
        return _failed(task, name, started, f"the reference could not be run: {exc}",
                       backend=kb.name, hardware=kb.is_hardware, model=router.models_used())
    stage("loop")
    with reference:  # its trial arrays live in temporary directories: remove them after
        outcome = await run_loop(task, router=router, backend=kb, reference=reference,
                                 settings=settings, on_turn=on_turn, should_stop=should_stop,
                                 kernel_args=args, max_turns=turns or task.max_turns,
                                 optimize_turns=optimize_turns)
    profile = await _profile(kb, task, outcome, stage)
    if isinstance(profile, ProfileResult) and profile.model and reference.flops is not None:
        from nkibot.sim.cost.quick import operator_roofline  # closed form: no simulator

        profile.model = operator_roofline(profile.model, reference.flops,
                                          reference.low_precision)
    return _assemble(task, name, kb, outcome, args, profile, started)


async def _preflight(router: Router, task: Task,
                     on_turn: Callable[[TurnRecord], None] | None) -> TurnRecord | None:
    """The lowering's decline, asked before the reference runs, when nothing follows it.

    A lowering-only chain (`--model lowering`, or `auto` without credentials) that
    declines ends the conversion: running the user's module for every trial first only
    made the user wait (tens of seconds for a large convolution) for the same answer.
    """
    backend = router.current
    if len(router.chain) != 1:
        return None
    began = time.monotonic()
    reason = await backend.preflight(task)
    if reason is None:
        return None
    record = TurnRecord(turn=1, model=backend.name, error=f"declined: {reason}",
                        seconds=round(time.monotonic() - began, 3))
    if on_turn is not None:
        on_turn(record)
    return record


async def _profile(kb: KernelBackend, task: Task, outcome: LoopOutcome, stage: Stage
                   ) -> ProfileResult | str | None:
    if outcome.status != "verified" or outcome.best_source is None:
        return None
    stage("profile")
    try:
        return await asyncio.to_thread(kb.profile, outcome.best_source, task)
    except Exception as exc:  # profiling is evidence, not correctness: keep the result
        return f"profiling failed: {exc}"


def _assemble(task: Task, name: str, kb: KernelBackend, outcome: LoopOutcome,
              args: list[KernelArg], profile: ProfileResult | str | None, started: float
              ) -> ConversionResult:
    reasons = list(outcome.reasons)
    if isinstance(profile, str):
        reasons.append(profile)
        profile = None
    if outcome.status in ("failed", "compiled") and outcome.verify is not None:
        reasons += [r for r in outcome.verify.reasons if r not in reasons]
    if outcome.status == "compiled":
        reasons.insert(0, "the best kernel compiled but did not pass verification")
    kernel = None
    if outcome.best_source is not None:
        kernel = KernelInfo(
            path=kernel_path(task), args=args, source=outcome.best_source,
            function=kernel_function(outcome.best_source) or kernel_function_name(task),
        )
    compiler = outcome.compile.compiler if outcome.compile is not None else ""
    return ConversionResult(
        status=outcome.status, target=name, backend=kb.name, hardware=kb.is_hardware,
        simulator=None if kb.is_hardware else (compiler or kb.name),
        model=outcome.models, turns=len(outcome.transcript), tokens=outcome.tokens,
        seconds=round(time.monotonic() - started, 3), kernel=kernel, compile=outcome.compile,
        verify=outcome.verify, profile=profile, transcript=outcome.transcript, reasons=reasons,
        optimize_chain=outcome.optimize_chain,
    )
