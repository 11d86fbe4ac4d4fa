"""Target resolution: where a target lives, and what it converts against.

A CUDA kernel (a `.cu`/`.cuh` file, or a `load_inline` source in a Python file) converts
against the PyTorch reference named by `--reference` or the config's `references:`; its
source rides along in the Task for the prompt. A forward that uses an op no backend can
express is refused before any work.
"""

from __future__ import annotations

import warnings
from pathlib import Path

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst

from nkibot.config.repo import RepoConfig
from nkibot.convert.cuda import (
    cuda_reference,
    find_kernel,
    global_functions,
    inline_kernels,
    is_cuda_file,
)
from nkibot.convert.discovery import TargetError, discover, resolve, suggest_paths
from nkibot.convert.staticops import forward_ops
from nkibot.jobs.model import Job
from nkibot.runner.workspace import python_files, resolve_inside
from nkibot.task import SourceKernel


def locate(root: Path, target: str) -> tuple[str, str, Path]:
    path, _, name = target.rpartition("::")
    if not path or not name:
        raise TargetError(f"`{target}` is not `path/to/file.py::Name`")
    file = resolve_inside(root, path)
    if not file.is_file():
        raise TargetError(f"`{path}` does not exist at this commit",
                          suggest_paths(path, python_files(root)))
    return path, name, file


def cuda_target(root: Path, job: Job, config: RepoConfig, path: str, name: str,
                source: str) -> tuple[str, str, Path, str]:
    """A CUDA kernel converts against its PyTorch reference (`--reference` or the config)."""
    if find_kernel(path, source, name) is None:
        kernels = global_functions(source) if is_cuda_file(path) else inline_kernels(source)
        found = ", ".join(f"`{k.name}`" for k in kernels)
        raise TargetError(f"`{path}` has no `__global__` function `{name}`",
                          f"CUDA kernels found there: {found}" if found else
                          "name a `__global__` function of that file")
    ref_path, ref_name, ref_file = locate(root, cuda_reference(
        job.target, config.references, job.options.reference))
    resolve(discover(ref_file.read_text("utf-8", errors="replace")), ref_path, ref_name)
    return ref_path, ref_name, ref_file, "cuda"


def migrated(kind: str, file: Path, ref_file: Path, path: str, name: str
             ) -> SourceKernel | None:
    """The kernel being replaced, for the prompt (CUDA always; Triton with a reference)."""
    source = file.read_text("utf-8", errors="replace")
    if kind == "cuda":
        kernel = find_kernel(path, source, name)
        return SourceKernel(language="cuda", path=path, name=name,
                            source=kernel.source if kernel else source)
    if kind == "triton" and file.resolve() != ref_file.resolve():
        return SourceKernel(language="triton", path=path, name=name, source=source)
    return None


def is_cuda(path: str, source: str, name: str) -> bool:
    """A CUDA file, or a Python file whose `load_inline` CUDA defines `name` (and no class)."""
    return is_cuda_file(path) or (find_kernel(path, source, name) is not None and not any(
        c.name == name for c in discover(source).candidates))


def refuse_unexpressible(file: Path, shown: str, name: str) -> None:
    """TargetError before any work when the module's forward uses an op no backend can
    express (data-dependent shapes, host round-trips, sampling): it could never verify."""
    try:
        module = cst.parse_module(file.read_text("utf-8", errors="replace"))
    except cst.ParserSyntaxError:
        return  # the loader reports syntax errors with more context
    cls = next((s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name),
               None)
    ops = forward_ops(cls).no_backend() if cls is not None else []
    if ops:
        listed = ", ".join(f"`{o}`" for o in ops)
        raise TargetError(
            f"`{shown}::{name}`'s forward uses {listed}, which no NKI backend can express "
            "(an output shape that depends on the data, a host round-trip, or random "
            "sampling the verifier cannot reproduce)",
            "convert a module without that op: move it out of the forward, or split the "
            "module and convert the part around it")
