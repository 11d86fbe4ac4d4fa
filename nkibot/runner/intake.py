"""A job's target intake: the repo config, the target and its reference, and the Task.

A Python module converts against itself; a Triton kernel against a configured PyTorch
reference (else itself, through its launcher on Triton's CPU interpreter); a CUDA kernel
against the reference `--reference` or the config names (`runner.targets`). Problems a
user can fix are TargetErrors with a hint.
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from nkibot.config.repo import ConfigError, RepoConfig, load_repo_config
from nkibot.config.settings import Settings
from nkibot.convert.discovery import (
    TargetError,
    choose_shapes,
    discover,
    resolve,
    triton_launcher,
    triton_reference,
)
from nkibot.github.gateway import GitHubGateway
from nkibot.jobs.model import Job
from nkibot.runner.targets import cuda_target, is_cuda, locate, migrated, refuse_unexpressible
from nkibot.task import Task, Tolerance


@dataclass
class Prepared:
    task: Task
    config: RepoConfig
    reference_path: str
    entry: str
    kind: str  # of the reference: "module", "function" or "triton" (a launcher)
    target_kind: str  # of what was asked for: "module" or "triton"
    integrated: dict[str, str] = field(default_factory=dict)


def _tolerance(job: Job) -> Tolerance | None:
    atol, rtol = job.options.atol, job.options.rtol
    if atol is None and rtol is None:
        return None
    return Tolerance(atol=atol if atol is not None else 1e-3, rtol=rtol if rtol is not None
                     else 1e-3)


async def _config(gw: GitHubGateway, job: Job, root: Path) -> RepoConfig:
    async def fetch(owner: str, repo: str, path: str) -> str | None:
        if f"{owner}/{repo}".lower() == job.repo.lower():
            local = root / path
            return local.read_text("utf-8") if local.is_file() else None
        return await gw.read_file(owner, repo, path)

    found = await load_repo_config(fetch, job.owner, job.name)
    if isinstance(found, ConfigError):
        raise TargetError(found.message(), "fix `.github/nki-bot.yml` and run `/nki retry`")
    return found


def _reference(root: Path, job: Job, config: RepoConfig, path: str, name: str, file: Path
               ) -> tuple[str, str, Path, str]:
    """(reference path, entry, file, kind of the requested target), Triton resolved."""
    source = file.read_text("utf-8", errors="replace")
    if is_cuda(path, source, name):
        return cuda_target(root, job, config, path, name, source)
    cand = resolve(discover(source), path, name)
    if cand.kind != "triton":
        return path, name, file, cand.kind
    ref = triton_reference(job.target, config.references,
                           triton_installed=importlib.util.find_spec("triton") is not None)
    if ref is None:
        # No configured reference: the kernel itself, run through its launcher on Triton's
        # CPU interpreter (load_task runs the launcher; a file without one is refused here).
        triton_launcher(source, name, path)
        return path, name, file, "triton"
    ref_path, ref_name, ref_file = locate(root, ref)
    resolve(discover(ref_file.read_text("utf-8", errors="replace")), ref_path, ref_name)
    return ref_path, ref_name, ref_file, "triton"


async def prepare(gw: GitHubGateway, job: Job, root: Path, settings: Settings) -> Prepared:
    """Config, discovery and the Task (the reference is described in the sandbox)."""
    from nkibot.convert.taskload import TaskLoadError, load_task

    config = await _config(gw, job, root)
    path, name, file = locate(root, job.target)
    ref_path, entry, ref_file, kind = _reference(root, job, config, path, name, file)
    refuse_unexpressible(ref_file, ref_path, entry)
    config_shapes = next((t.shapes for t in config.targets if t.target == job.target), [])
    shapes, origin = choose_shapes(job.options.shapes, job.issue_shapes, config_shapes)
    try:
        task = await asyncio.to_thread(
            load_task, ref_file, entry, shapes=shapes or None, tolerance=_tolerance(job),
            turns=job.options.turns, compile_timeout_s=settings.compile_timeout_s,
            display_path=ref_path)
    except TaskLoadError as exc:
        raise TargetError(str(exc.args[0]) if exc.args else str(exc),
                          getattr(exc, "hint", "") or f"input shapes came from {origin}") from exc
    migrated_from = migrated(kind, file, ref_file, path, name)
    if migrated_from is not None:
        task = task.model_copy(update={"migrate_from": migrated_from})
    # The harness's entry (a Triton kernel's launcher) and kind drive the published test.
    return Prepared(task, config, ref_path, task.entry_point, kind=task.kind,
                    target_kind=kind)
