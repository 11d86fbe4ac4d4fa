"""`nkibot verify FILE::Name --kernel KERNEL.py[::function]`: check a hand-written kernel.

Same front door as the conversion loop (`verify.check`): harness, trials and guards. The
JSON result has the same shape as `nkibot convert --json` (status, verify, hardware,
reasons, backend, kernel).
Exit code: 0 verified, 1 any check failed, 2 bad arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nkibot.backends.base import KernelBackend
from nkibot.convert.options import JsonOption, ShapeOption, TargetOption
from nkibot.results import ConversionResult, TrialStats
from nkibot.verify.check import check_kernel, published, static_rejection

if TYPE_CHECKING:
    from rich.table import Table


def split_target(target: str, what: str) -> tuple[Path, str | None]:
    """`path.py::Name` -> (path, Name); the name part may be absent (None)."""
    path, sep, name = target.rpartition("::")
    if not sep:
        return Path(target), None
    if not path or not name:
        raise typer.BadParameter(f"expected {what}")
    return Path(path), name


def _backend(name: str, function: str, kernel_file: str, platform: str) -> KernelBackend:
    if name == "sim":
        from nkibot.backends.sim import SimBackend

        return SimBackend(function=function, kernel_file=kernel_file, platform=platform)
    from nkibot.backends.select import select_backend

    return select_backend("neuron")


def trials_table(trials: list[TrialStats]) -> Table:
    """One row per trial (and output, when there are several); figures are kept whole and
    words fold onto more lines, so nothing is cut at 80 columns. The dtype column shows
    only when a dtype is wrong."""
    from rich import box
    from rich.table import Table

    outputs = len({t.output for t in trials}) > 1
    dtypes = not all(t.dtype_ok for t in trials)
    heads = ["trial", *(["output"] if outputs else []), "seed", "inputs", "ok", "max abs",
             "max rel", "wrong", "nan/inf", *(["dtype"] if dtypes else [])]
    table = Table(box=box.SIMPLE_HEAD)
    for head in heads:
        whole = head not in ("inputs", "dtype")
        table.add_column(head, overflow="fold", no_wrap=whole,
                         min_width=len(head) if whole else None)
    for t in trials:
        dtype = [t.actual_dtype if t.dtype_ok else
                 f"[red]{t.actual_dtype}[/] (want {t.expected_dtype})"] if dtypes else []
        table.add_row(str(t.trial), *([str(t.output)] if outputs else []),
                      "-" if t.seed is None else str(t.seed), t.label.split(",")[0],
                      "yes" if t.passed else "[red]no[/]", f"{t.max_abs_error:.2g}",
                      f"{t.max_rel_error:.2g}", f"{t.mismatched}/{t.total}",
                      f"{t.nan_count}/{t.inf_count}", *dtype)
    return table


def _print_table(result: ConversionResult) -> None:
    from rich.console import Console

    console = Console()
    colour = {"verified": "green", "compiled": "yellow"}.get(result.status, "red")
    where = (f"{result.platform.capitalize()} hardware" if result.hardware
             else f"simulator ({result.simulator}), checked for {result.platform}")
    console.print(f"[bold {colour}]{result.status}[/] {result.target} with "
                  f"{result.kernel.path if result.kernel else '?'} on {where}")
    if result.verify is not None and result.verify.trials:
        console.print(trials_table(result.verify.trials))
    for reason in result.reasons:
        console.print(f"  [red]x[/] {reason}", markup=True, highlight=False)


def verify(
    target: Annotated[str, typer.Argument(help="the PyTorch reference, FILE::Name")],
    kernel: Annotated[str, typer.Option("--kernel", help="KERNEL.py[::function]")],
    backend: Annotated[str, typer.Option(help="sim|neuron")] = "sim",
    trials: Annotated[int, typer.Option(
        min=1, max=50, help="seeded trials (plus large-magnitude, offset, overflow)")] = 5,
    shape: ShapeOption = None,
    json_output: JsonOption = False,
    platform: TargetOption = None,
) -> None:
    """Check a kernel against its PyTorch reference: trials, statistics and guards."""
    from nkibot.config.settings import Settings
    from nkibot.config.targets import parse_shape
    from nkibot.convert.taskload import TaskLoadError, load_task
    from nkibot.logging import configure
    from nkibot.verify.check import KernelSourceError, resolve_function
    from nkibot.verify.isolation import configure_from

    configure("warning", json=False)  # stderr only: stdout carries the --json result
    ref_path, name = split_target(target, "FILE::Name, e.g. examples/rmsnorm.py::RMSNorm")
    kernel_path, function = split_target(kernel, "KERNEL.py[::function]")
    if name is None:
        raise typer.BadParameter("expected FILE::Name, e.g. examples/rmsnorm.py::RMSNorm")
    if backend not in ("sim", "neuron"):
        raise typer.BadParameter("--backend must be sim or neuron")
    chosen_platform = _platform(platform)
    settings = Settings()
    found = configure_from(settings)
    if found.level != "full":
        typer.echo(f"sandbox isolation {found.describe()} (nkibot doctor says how to fix it)",
                   err=True)
    try:
        src = kernel_path.read_text(encoding="utf-8")
        function = resolve_function(src, function)
        static = static_rejection(src, target, str(kernel_path), function, backend)
        if static is not None:  # no need to run the reference for a forbidden kernel
            _emit(static, json_output, chosen_platform)
        overrides = [parse_shape(s) for s in shape or []]
        task = load_task(ref_path, name, shapes=overrides or None, display_path=str(ref_path),
                         compile_timeout_s=settings.compile_timeout_s)
    except KernelSourceError as exc:
        typer.echo(f"cannot verify {target}: {kernel_path}: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (OSError, TaskLoadError, ValueError) as exc:
        typer.echo(f"cannot verify {target}: {exc}", err=True)
        raise typer.Exit(2) from exc
    task = task.model_copy(update={"seeds": list(range(trials))})
    try:
        chosen = _backend(backend, function, kernel_path.name, chosen_platform)
    except Exception as exc:  # a missing device or SDK: say so, exit like a bad argument
        typer.echo(f"backend {backend!r} unavailable: {exc}", err=True)
        raise typer.Exit(2) from exc
    _emit(check_kernel(task, src, str(kernel_path), chosen, function), json_output,
          chosen_platform)


def _platform(requested: str | None) -> str:
    from nkibot.backends.select import host_platform
    from nkibot.config.platform import PlatformError
    from nkibot.config.settings import Settings

    try:
        return host_platform(requested, Settings().target)
    except PlatformError as exc:
        raise typer.BadParameter(str(exc), param_hint="--target") from exc


def _emit(result: ConversionResult, json_output: bool, platform: str) -> None:
    result = published(result, platform)
    if json_output:
        typer.echo(result.model_dump_json(indent=2))
    else:
        _print_table(result)
    raise typer.Exit(0 if result.status == "verified" else 1)
