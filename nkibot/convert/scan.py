"""Discovery over a whole repository: what is worth converting, ranked (no code is run).

`discover_path(path)` is the stable entry point for other surfaces (the MCP server's
`discover` tool, the CLI); `discover_sources(files)` does the same on file texts (the
webhook service reads them from GitHub). Each `KernelCandidate` says what it is
(`nn.Module`, `@triton.jit`, CUDA), the input shapes found, whether the deterministic
lowering probably covers it (a static estimate: "0 tokens"), how many times the repo's
forwards call it, and which of its ops no backend can express.
"""

from __future__ import annotations

import fnmatch
import re
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst

from nkibot.config.repo import CONFIG_PATH, RepoConfig, parse_repo_config
from nkibot.convert.cuda import global_functions, inline_kernels, is_cuda_file
from nkibot.convert.discovery import _imports, _module_classes, dotted
from nkibot.convert.static_inputs import forward_params, static_inputs
from nkibot.convert.staticops import LOWERED_MODULES, ForwardOps, forward_ops

CandidateKind = Literal["module", "triton", "cuda"]
KIND_LABELS: dict[str, str] = {"module": "nn.Module", "triton": "@triton.jit", "cuda": "CUDA"}
DEFAULT_GLOBS = ("*.py", "*.cu", "*.cuh")
MAX_FILE_BYTES = 512 * 1024
MAX_FILES = 2000
_WORTH_PARSING = ("Module", "triton", "load_inline")
_SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv", ".tox"})


@dataclass(frozen=True)
class KernelCandidate:
    """One convertible target of a repository (see the module docstring)."""

    #: `path::Name`, relative to the scanned root.
    target: str
    kind: CandidateKind
    line: int
    #: `NAME=DIMSxDTYPE` per input, when read statically; empty with `shapes_from` None
    #: means "needs shapes" (give them with --shape or in the config).
    shapes: tuple[str, ...] = ()
    #: "repo config", "get_inputs()" (read statically or, if empty, at run time) or None.
    shapes_from: str | None = None
    #: Static estimate: every op of the forward (or of the reference) has a lowering.
    lowering: bool = False
    #: Ops of the forward the lowering has no handler for.
    uncovered: tuple[str, ...] = ()
    #: Ops no backend can express (data-dependent shapes, host round-trips, sampling).
    no_backend: tuple[str, ...] = ()
    op_count: int = 0
    #: Call sites in the repository's forwards (by class name).
    calls: int = 0
    #: The PyTorch reference a Triton or CUDA kernel converts against, when named.
    reference: str | None = None

    @property
    def kind_label(self) -> str:
        return KIND_LABELS[self.kind]


def selected(path: str, globs: Sequence[str], exclude: Sequence[str] = ()) -> bool:
    """`path` matches a glob of `globs` (default: Python and CUDA files) and none of `exclude`.

    `*` crosses directories (`src/*` is all of src); a glob without wildcards is a file
    or a directory prefix.
    """
    def hit(pattern: str) -> bool:
        pattern = pattern.strip().lstrip("./") or "*"
        if not any(ch in pattern for ch in "*?["):
            return path == pattern or path.startswith(pattern.rstrip("/") + "/")
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, "*/" + pattern)
    kinds = path.endswith(DEFAULT_GLOBS[0][1:]) or is_cuda_file(path)
    return kinds and any(hit(g) for g in (globs or DEFAULT_GLOBS)) and not any(
        hit(g) for g in exclude)


@dataclass
class _PyFile:
    path: str
    module: cst.Module
    classes: dict[str, tuple[cst.ClassDef, ForwardOps]]
    lines: dict[str, int]


def _line_of(text: str, keyword: str, name: str) -> int:
    # A regex instead of libcst's position metadata, which costs more than the parse itself.
    match = re.search(rf"^[ \t]*(?:async[ \t]+)?{keyword}[ \t]+{re.escape(name)}\b", text, re.M)
    return text.count("\n", 0, match.start()) + 1 if match else 1


def _python(path: str, text: str) -> tuple[_PyFile | None, list[KernelCandidate]]:
    if not any(word in text for word in _WORTH_PARSING):
        return None, []  # no Module base, no Triton, no load_inline: nothing to find
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return None, []  # a file that does not parse offers nothing; the scan goes on
    triton_jit, _legacy, bases = _imports(module)
    classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    modules = _module_classes(classes, bases)
    info = _PyFile(path, module, {c.name.value: (c, forward_ops(c)) for c in modules},
                   {c.name.value: _line_of(text, "class", c.name.value) for c in modules})
    out = [KernelCandidate(f"{path}::{f.name.value}", "triton", _line_of(text, "def", f.name.value))
           for f in module.body if isinstance(f, cst.FunctionDef)
           and {dotted(d.decorator) for d in f.decorators} & triton_jit]
    out += [KernelCandidate(f"{path}::{k.name}", "cuda", k.line) for k in inline_kernels(text)]
    return info, out


def _module_candidate(info: _PyFile, name: str, line: int, graph: dict[str, ForwardOps],
                      calls: Counter[str], shapes: Mapping[str, tuple[str, ...]]
                      ) -> KernelCandidate:
    cls, ops = info.classes[name]
    target = f"{info.path}::{name}"
    found, origin = shapes.get(target, ()), "repo config" if target in shapes else None
    alone = len(info.classes) == 1 or name == "Model"
    if origin is None and alone and any(isinstance(s, cst.FunctionDef) and s.name.value ==
                                        "get_inputs" for s in info.module.body):
        found = static_inputs(info.module, forward_params(cls)) or ()
        origin = "get_inputs()"
    return KernelCandidate(
        target, "module", line, shapes=found, shapes_from=origin,
        lowering=_covered(name, graph, set()), uncovered=tuple(ops.uncovered()),
        no_backend=tuple(ops.no_backend()), op_count=ops.op_count, calls=calls[name])


def _covered(name: str, graph: dict[str, ForwardOps], seen: set[str]) -> bool:
    """Own ops lowered and every called repo class covered too (unknown classes are not)."""
    ops = graph.get(name)
    if ops is None:
        return name in LOWERED_MODULES  # `from torch.nn import Linear` used bare
    if name in seen or ops.uncovered() or ops.no_backend():
        return False
    seen.add(name)
    return all(_covered(callee, graph, seen) for callee in ops.calls)


def _with_references(cands: list[KernelCandidate], references: Mapping[str, str]
                     ) -> list[KernelCandidate]:
    """A Triton or CUDA kernel takes coverage and op count from its PyTorch reference."""
    by_target = {c.target: c for c in cands}
    out = []
    for c in cands:
        ref = references.get(c.target)
        base = by_target.get(ref) if ref else None
        if c.kind != "module" and base is not None:
            c = replace(c, reference=ref, lowering=base.lowering, op_count=base.op_count,
                        shapes=base.shapes, shapes_from=base.shapes_from,
                        no_backend=base.no_backend, uncovered=base.uncovered)
        elif c.kind != "module" and ref:
            c = replace(c, reference=ref)
        out.append(c)
    return out


def worth_key(c: KernelCandidate) -> tuple[bool, bool, int, int, str]:
    """Most worth converting first: expressible, lowering-covered, hot, then larger."""
    return (bool(c.no_backend), not c.lowering, -c.calls, -c.op_count, c.target)


def discover_sources(files: Mapping[str, str], *, config: RepoConfig | None = None,
                     globs: Sequence[str] = ()) -> list[KernelCandidate]:
    """Candidates of a repository given as {relative path: text}, ranked by `worth_key`.

    `globs` narrows the config's `scan:` globs (as `/nki scan PATH` does); the config's
    `exclude:` always applies.
    """
    config = config or RepoConfig()
    chosen = [p for p in sorted(files) if selected(p, config.scan, config.exclude)
              and (not globs or selected(p, globs))]
    py: list[_PyFile] = []
    cands: list[KernelCandidate] = []
    for path in chosen:
        if is_cuda_file(path):
            cands += [KernelCandidate(f"{path}::{k.name}", "cuda", k.line)
                      for k in global_functions(files[path])]
            continue
        info, found = _python(path, files[path])
        cands += found
        if info is not None:
            py.append(info)
    graph = {name: ops for info in py for name, (_, ops) in info.classes.items()}
    calls: Counter[str] = Counter()
    for ops in graph.values():
        calls.update(ops.calls)
    shapes = {t.target: tuple(f"{s.name}={'x'.join(map(str, s.shape))}x{s.dtype}"
                              for s in t.shapes) for t in config.targets if t.shapes}
    for info in py:
        for name in info.classes:
            cands.append(_module_candidate(info, name, info.lines.get(name, 1), graph, calls,
                                           shapes))
    return sorted(_with_references(cands, config.references), key=worth_key)


def read_tree(root: Path) -> dict[str, str]:
    """Python and CUDA files under `root` (bounded in count and size), by relative path."""
    files: dict[str, str] = {}
    for file in sorted(root.rglob("*")):
        rel = file.relative_to(root)
        if any(part in _SKIP_DIRS for part in rel.parts) or not file.is_file():
            continue
        if selected(rel.as_posix(), DEFAULT_GLOBS) and file.stat().st_size <= MAX_FILE_BYTES:
            files[rel.as_posix()] = file.read_text("utf-8", errors="replace")
        if len(files) >= MAX_FILES:
            break
    return files


def discover_path(path: str | Path, *, config: RepoConfig | None = None
                  ) -> list[KernelCandidate]:
    """Ranked candidates in a file or a directory tree (see `KernelCandidate`).

    A directory's `.github/nki-bot.yml` (its `references`, `targets` shapes, `scan` and
    `exclude`) is used when `config` is not given. Raises FileNotFoundError for a missing
    path; files that do not parse are skipped.
    """
    root = Path(path)
    if root.is_file():
        return discover_sources({root.name: root.read_text("utf-8", errors="replace")},
                                config=config)
    if not root.is_dir():
        raise FileNotFoundError(f"{path} is neither a file nor a directory")
    if config is None and (root / CONFIG_PATH).is_file():
        parsed = parse_repo_config((root / CONFIG_PATH).read_text("utf-8", errors="replace"))
        config = parsed if isinstance(parsed, RepoConfig) else None
    return discover_sources(read_tree(root), config=config)
