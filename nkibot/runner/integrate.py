"""Codemod integration: `integrate: dispatch` rewires the user's module to the kernel."""

from __future__ import annotations

from pathlib import Path

import structlog

from nkibot.convert.codemod import CodemodError, integrate_dispatch
from nkibot.github.publish import output_paths
from nkibot.results import ConversionResult
from nkibot.runner.intake import Prepared
from nkibot.runner.workspace import resolve_inside

log = structlog.get_logger("nkibot.runner.job")


def integration(prep: Prepared, result: ConversionResult, root: Path) -> dict[str, str]:
    """The codemodded module for `integrate: dispatch` (module targets only)."""
    # Only a module target is rewired; a Triton kernel's PyTorch reference is left alone.
    if (prep.config.integrate != "dispatch" or result.kernel is None
            or prep.target_kind != "module"):
        return {}
    kernel_path, _ = output_paths(result, prep.config.output_dir)
    module_file = resolve_inside(root, prep.reference_path)
    args = result.kernel.args
    try:
        text = integrate_dispatch(
            module_file.read_text("utf-8"), class_name=prep.entry,
            module_path=prep.reference_path, kernel_path=kernel_path,
            function=result.kernel.function, n_inputs=sum(a.source == "input" for a in args),
            state_keys=[a.key or a.name for a in args if a.source == "state_dict"])
    except CodemodError as exc:
        log.warning("integrate: dispatch skipped", reason=str(exc))
        return {}
    return {prep.reference_path: text}
