"""`discover(path)`: the convertible things in a file or a folder, with their shapes.

Discovery itself is `nkibot.convert.discovery` (libcst, no user code runs). Shapes come
from the repository config (`.github/nki-bot.yml` targets) or, for files that define
`get_inputs()`, from describing the module in the sandboxed harness, which is bounded to
a few targets per call because each is a child process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nkibot.config.repo import RepoConfig, parse_repo_config
from nkibot.convert.discovery import TargetError, discover
from nkibot.convert.scan import discover_sources, read_tree
from nkibot.mcp.workspace import Workspace

#: Folders never walked: environments, caches, our own outputs.
SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__",
                       "site-packages", "nki_out", ".mypy_cache", ".pytest_cache", "build",
                       "dist"})
MAX_FILES = 2000
MAX_DESCRIBED = 8

Describe = Callable[[str], list[dict[str, Any]] | None]


def python_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        folders = path.relative_to(root).parts[:-1]
        if any(part in SKIP_DIRS or part.startswith(".") for part in folders):
            continue
        found.append(path)
        if len(found) >= MAX_FILES:
            break
    return found


def config_shapes(workspace: Workspace) -> dict[str, list[dict[str, Any]]]:
    """Target -> shapes from the workspace's `.github/nki-bot.yml`, when it has one."""
    from nkibot.config.repo import ConfigError, parse_repo_config

    path = workspace.root / ".github" / "nki-bot.yml"
    if not path.is_file():
        return {}
    config = parse_repo_config(path.read_text(encoding="utf-8"))
    if isinstance(config, ConfigError):
        return {}
    return {spec.target: [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype}
                          for s in spec.shapes] for spec in config.targets if spec.shapes}


def discover_tree(workspace: Workspace, root: Path, *, describe: Describe) -> dict[str, Any]:
    """Every candidate under `root`, in file order, with shapes where they can be known."""
    from_config = config_shapes(workspace)
    candidates: list[dict[str, Any]] = []
    problems: list[str] = []
    described = 0
    for file in python_files(root):
        rel = workspace.relative(file)
        try:
            found = discover(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, TargetError) as exc:
            problems.append(f"{rel}: {exc}")
            continue
        for c in found.candidates:
            if c.kind not in ("module", "triton", "legacy"):
                continue
            target = f"{rel}::{c.name}"
            entry: dict[str, Any] = {"target": target, "kind": c.kind, "line": c.line,
                                     "shapes": None, "shapes_from": None}
            if c.kind == "legacy":
                entry["note"] = "legacy neuronxcc.nki dialect: not executed"
            elif target in from_config:
                entry.update(shapes=from_config[target], shapes_from="config")
            elif c.kind == "module" and found.has_get_inputs and described < MAX_DESCRIBED:
                described += 1
                shapes = describe(target)
                if shapes is not None:
                    entry.update(shapes=shapes, shapes_from="get_inputs")
            candidates.append(entry)
    return {"root": workspace.relative(root) or ".",
            "candidates": ranked(workspace, root, candidates), "problems": problems}


def ranked(workspace: Workspace, root: Path, candidates: list[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """The entries with the repository scan's view added (`nkibot.convert.scan`): lowering
    coverage (a static estimate), call count, ops no backend can express, a rank, and the
    CUDA kernels under `root`."""
    config_file = workspace.root / ".github" / "nki-bot.yml"
    config = parse_repo_config(config_file.read_text("utf-8")) if config_file.is_file() else None
    base = workspace.relative(root) if root.is_dir() else workspace.relative(root.parent)
    prefix = f"{base}/" if base and base != "." else ""
    texts = ({workspace.relative(root): root.read_text("utf-8", errors="replace")}
             if root.is_file() else {prefix + k: v for k, v in read_tree(root).items()})
    scan = discover_sources(texts, config=config if isinstance(config, RepoConfig) else None)
    by_target = {e["target"]: e for e in candidates}
    for rank, c in enumerate(scan, start=1):
        entry = by_target.get(c.target)
        if entry is None and c.kind == "cuda":
            entry = {"target": c.target, "kind": "cuda", "line": c.line, "shapes": None,
                     "shapes_from": None}
            candidates.append(entry)
        if entry is not None:
            entry.update(rank=rank, lowering=c.lowering, calls=c.calls, op_count=c.op_count,
                         no_backend=list(c.no_backend), uncovered=list(c.uncovered),
                         reference=c.reference)
    return candidates
