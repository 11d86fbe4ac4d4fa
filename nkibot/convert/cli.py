"""`nkibot convert FILE::Name`: run the conversion pipeline locally, no GitHub involved.

Progress (turn, stage, elapsed) goes to stderr; the summary, or with `--json` the
ConversionResult, goes to stdout. Exit code 0 only when the kernel verified.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nkibot.convert.options import JsonOption, ShapeOption, TargetOption

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status as RichStatus

    from nkibot.config.settings import Settings
    from nkibot.results import ConversionResult, TurnRecord


class Progress:
    """The stderr display: one status line (stage, turn, elapsed) and one line per turn."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.stage = "starting"
        self.turn = 0
        self.status: RichStatus | None = None

    def _text(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"[bold]{self.stage}[/] · turn {self.turn} · {elapsed:.0f} s"

    def on_stage(self, stage: str) -> None:
        self.stage = {"loop": "compile-verify-fix loop"}.get(stage, stage)
        if self.status is not None:
            self.status.update(self._text())
        self.console.log(f"stage: {self.stage}")

    def on_turn(self, record: TurnRecord) -> None:
        self.turn = record.turn
        verdict = ("verified" if record.verified else "compiled" if record.compiled
                   else "no kernel" if record.compiled is None else "compile failed")
        err = (f" {record.worst}" if record.worst else f" max_abs {record.max_abs_error:.3g}"
               if record.max_abs_error is not None else "")
        detail = "" if record.verified or not record.error else f" — {record.error}"
        self.console.log(f"turn {record.turn} [{record.model}]: {verdict}{err}"
                         f" ({record.seconds:.1f} s){detail}", markup=False)
        if self.status is not None:
            self.status.update(self._text())


def _where(result: ConversionResult) -> str:
    """Where the kernel ran; a run that never reached the simulator does not claim it did."""
    if result.hardware:
        return f"on {result.platform.capitalize()} hardware"
    trials = result.verify is not None and bool(result.verify.trials)
    if trials and (result.simulator or result.backend not in ("", "none")):
        return (f"SIMULATED on {result.simulator or result.backend} (no hardware); "
                f"checked for {result.platform}")
    return f"no kernel was run, on a simulator or a device; checked for {result.platform}"


def summary_lines(result: ConversionResult, written: list[Path],
                  host_isolation: str | None = None) -> list[str]:
    """The human summary printed on stdout (pure). `host_isolation`: this host's sandbox,
    said when the result carries none (no kernel was verified)."""
    from nkibot.github.render import isolation_of
    from nkibot.results import worst_error

    isolation = isolation_of(result) or (
        f"{host_isolation} (this host's sandbox)" if host_isolation else "")
    lines = [f"{result.status.upper()}: {result.target} ({_where(result)})",
             f"model: {result.model} · turns: {result.turns} · tokens: {result.tokens.total}"
             f" · {result.seconds:.1f} s" + (f" · isolation: {isolation}" if isolation else "")]
    if result.verify is not None and result.verify.trials:
        passed = sum(t.passed for t in result.verify.trials)
        lines.append(f"verification: {passed}/{len(result.verify.trials)} trials passed,"
                     f" {worst_error(result.verify.trials)}")
    if result.profile is not None:
        lines.append(f"profile: {result.profile.measured_on}")
        lines += _model_line(result.profile.model)
    lines += [f"reason: {r}" for r in result.reasons]
    lines += [f"wrote {p}" for p in written]
    return lines


def _model_line(model: dict[str, object]) -> list[str]:
    """The cost model's headline, under its own label (empty when the model did not run)."""
    us, fraction = model.get("time_us"), model.get("roofline_fraction")
    if not isinstance(us, int | float):
        return []
    roofline = f", roofline {fraction:.0%}" if isinstance(fraction, int | float) else ""
    engine = model.get("critical_engine")
    bottleneck = f", bottleneck {engine}" if isinstance(engine, str) and engine else ""
    return [f"modelled: {us:.3f} µs{roofline}{bottleneck} ({model.get('label', 'model estimate')})"]


def _split_target(target: str) -> tuple[Path, str]:
    path, sep, name = target.rpartition("::")
    if not sep or not path or not name:
        raise typer.BadParameter("expected FILE::Name, e.g. examples/rmsnorm.py::RMSNorm")
    return Path(path), name


def convert(
    target: Annotated[str, typer.Argument(help="FILE::Name of the module or function")],
    out: Annotated[Path, typer.Option("--out", help="output directory")] = Path("nki_out"),
    model: Annotated[str, typer.Option(help="auto|lowering|claude|bedrock")] = "auto",
    backend: Annotated[str, typer.Option(help="auto|sim|neuron")] = "auto",
    turns: Annotated[int | None, typer.Option(help="turn budget (default 10)")] = None,
    optimize_turns: Annotated[int, typer.Option(
        "--optimize-turns", min=0, max=10,
        help="turns asking for a faster kernel after the first verified one (0: off)")] = 3,
    shape: ShapeOption = None,
    json_output: JsonOption = False,
    platform: TargetOption = None,
) -> None:
    """Convert FILE::Name into a verified NKI kernel, locally."""
    from rich.console import Console

    from nkibot.backends.select import host_platform
    from nkibot.config.platform import PlatformError
    from nkibot.config.settings import Settings
    from nkibot.config.targets import parse_shape
    from nkibot.convert.pipeline import ConvertOptions
    from nkibot.convert.pipeline import convert as run_pipeline
    from nkibot.convert.taskload import TaskLoadError, load_task
    from nkibot.github.artifacts import write_local_outputs
    from nkibot.logging import configure
    from nkibot.verify import zygote
    from nkibot.verify.reference import reference_folders

    err = Console(stderr=True, log_path=False)
    path, name = _split_target(target)
    settings = Settings()
    try:
        chosen = host_platform(platform, settings.target)
    except PlatformError as exc:
        raise typer.BadParameter(str(exc), param_hint="--target") from exc
    # Logs go to stderr, scrubbed, and only warnings: stdout carries the --json result.
    configure("warning", json=False)
    host_isolation = _isolation_notice(settings, err)
    # The torch children start from one warm sandbox, which imports torch from now on.
    with zygote.session(reference_folders(path), enabled=settings.warm_sandbox):
        try:
            overrides = [parse_shape(s) for s in shape or []]
            task = load_task(path, name, shapes=overrides or None, turns=turns,
                             compile_timeout_s=settings.compile_timeout_s,
                             display_path=str(path))
        except (TaskLoadError, ValueError) as exc:
            err.print(f"[red]cannot load {target}:[/] {exc}", markup=True)
            raise typer.Exit(2) from exc
        progress = Progress(err)
        with err.status(progress._text()) as status:
            progress.status = status
            result = asyncio.run(run_pipeline(task, settings=settings, options=ConvertOptions(
                model=model, backend=backend, turns=turns, on_turn=progress.on_turn,
                on_stage=progress.on_stage, target=target, platform=chosen,
                optimize_turns=optimize_turns)))
    written = write_local_outputs(result, task, out)
    if json_output:
        typer.echo(result.model_dump_json(indent=2))
    else:
        for line in summary_lines(result, written, host_isolation):
            typer.echo(line)
    raise typer.Exit(0 if result.status == "verified" else 1)


def _isolation_notice(settings: Settings, err: Console) -> str:
    """Configure the sandbox; say so on stderr when this host only gives reduced isolation.
    The level, for the summary."""
    from nkibot.verify.isolation import configure_from

    found = configure_from(settings)
    if found.level != "full":
        err.print(f"[yellow]sandbox isolation {found.describe()}[/] (nkibot doctor says how "
                  "to fix it)", markup=True)
    return found.level
