"""`nkibot sim run KERNEL.py::function --inputs a.npy b.npy --out out.npy`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from nkibot.sim import targets
from nkibot.sim.errors import SimError

app = typer.Typer(help="Run NKI kernels on the CPU simulator.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)


def _load_kernel(spec: str) -> Any:
    path_text, sep, func = spec.partition("::")
    path = Path(path_text)
    if not sep or not func or not path.is_file():
        raise typer.BadParameter(f"expected KERNEL.py::function with an existing file, got {spec}")
    module_spec = importlib.util.spec_from_file_location(f"_nkibot_cli_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise typer.BadParameter(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, func)


def _save(out: Path, result: Any) -> list[Path]:
    results = result if isinstance(result, tuple) else (result,)
    if len(results) == 1:
        np.save(out, np.asarray(results[0]))
        return [out]
    paths = [out.with_name(f"{out.stem}_{i}{out.suffix}") for i in range(len(results))]
    for p, r in zip(paths, results, strict=True):
        np.save(p, np.asarray(r))
    return paths


@app.command("run")
def run(
    kernel: Annotated[str, typer.Argument(help="KERNEL.py::function")],
    more_inputs: Annotated[list[Path] | None, typer.Argument(hidden=True)] = None,
    inputs: Annotated[list[Path] | None, typer.Option("--inputs", help=".npy inputs")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="where to save the result")] = None,
    lnc: Annotated[int, typer.Option("--lnc", help="logical cores (1 or 2)")] = 1,
    target: Annotated[str | None, typer.Option(
        "--target", help="trn1|trn2|trn3 (default: NEURON_PLATFORM_TARGET_OVERRIDE, else "
                         "trn3, as the official simulator)")] = None,
) -> None:
    """Run KERNEL.py::function on .npy inputs and save its result(s)."""
    # The simulator (NumPy, ml_dtypes, nki) loads when a command runs, not with `nkibot`.
    from nkibot.sim.runtime import activate, stats

    arrays = [np.load(p) for p in [*(inputs or []), *(more_inputs or [])]]
    try:
        chosen = None if target is None else targets.resolve(target)
    except ValueError as exc:
        raise typer.BadParameter("use trn1, trn2 or trn3", param_hint="--target") from exc
    with activate(force=True, target=chosen):
        result = _run(kernel, arrays, lnc)
    if out is not None:
        for p in _save(out, result):
            typer.echo(f"wrote {p}")
    typer.echo(json.dumps(stats()))


def _run(kernel: str, arrays: list[Any], lnc: int) -> Any:
    from nkibot.sim.runtime import simulate

    try:
        fn = _load_kernel(kernel)
    except (ImportError, SyntaxError, AttributeError, SimError) as err:
        typer.echo(f"error: cannot load {kernel}: {err}", err=True)
        raise typer.Exit(1) from None
    try:
        launched = fn[lnc] if lnc != 1 else fn
        return simulate(launched)(*arrays)
    except SimError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
