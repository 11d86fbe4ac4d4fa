"""CUDA kernels as conversion targets: `__global__` functions, found without compiling anything.

Two places hold CUDA in a PyTorch repository: `.cu`/`.cuh` files, and the strings passed
as `cuda_sources=` to `torch.utils.cpp_extension.load_inline` in a Python file. Both are
read as text here (the user's code is never executed). A CUDA kernel is converted against
a PyTorch reference module: its semantics are defined by that module, which the harness
runs, and the CUDA source goes into the model's prompt as the kernel to migrate.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    import libcst.matchers as m

from nkibot.config.targets import CUDA_SUFFIXES, reference_hint
from nkibot.convert.discovery import TargetError, dotted

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_GLOBAL = re.compile(r"\b__global__\b([^;{(]*?)\b([A-Za-z_]\w*)\s*\(")


@dataclass(frozen=True)
class CudaKernel:
    """One `__global__` function: its name, 1-based line, and the source that holds it."""

    name: str
    line: int
    source: str


def _blank(match: re.Match[str]) -> str:
    # Keep newlines so that line numbers still count from the original text.
    return "".join(ch if ch == "\n" else " " for ch in match.group(0))


def global_functions(source: str) -> list[CudaKernel]:
    """The `__global__` functions defined in CUDA `source`, in source order."""
    text = _BOUNDS.sub(_blank, _COMMENT.sub(_blank, source))
    found: list[CudaKernel] = []
    for match in _GLOBAL.finditer(text):
        name = match.group(2)
        if name in ("__launch_bounds__", "void") or any(k.name == name for k in found):
            continue
        found.append(CudaKernel(name, text.count("\n", 0, match.start(2)) + 1, source))
    return found


def _strings(node: cst.BaseExpression, consts: dict[str, str]) -> list[str]:
    """The string value(s) of a literal, a list/tuple of them, or a module-level name."""
    if isinstance(node, cst.Name):
        return [consts[node.value]] if node.value in consts else []
    if isinstance(node, cst.List | cst.Tuple):
        return [s for el in node.elements for s in _strings(el.value, consts)]
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return [value] if isinstance(value, str) else []
    return []


def _string_constants(module: cst.Module) -> dict[str, str]:
    consts: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)):
                values = _strings(small.value, {})
                if len(values) == 1:
                    consts[small.targets[0].target.value] = values[0]
    return consts


def inline_kernels(py_source: str) -> list[CudaKernel]:
    """`__global__` functions in the `cuda_sources` given to `load_inline` in a Python file.

    Lines count within the CUDA string (Python positions are not kept for string bodies).
    """
    if "load_inline" not in py_source:
        return []  # the parse below is the expensive part of a scan
    try:
        module = cst.parse_module(py_source)
    except cst.ParserSyntaxError:
        return []
    consts = _string_constants(module)
    found: list[CudaKernel] = []
    for call in m.findall(module, m.Call()):
        assert isinstance(call, cst.Call)
        if not dotted(call.func).endswith("load_inline"):
            continue
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "cuda_sources":
                for text in _strings(arg.value, consts):
                    found.extend(global_functions(text))
    return found


def is_cuda_file(path: str) -> bool:
    return path.endswith(CUDA_SUFFIXES)


def find_kernel(path: str, text: str, name: str) -> CudaKernel | None:
    """The CUDA kernel `name` in a `.cu`/`.cuh` file or in a Python file's `load_inline`."""
    kernels = global_functions(text) if is_cuda_file(path) else inline_kernels(text)
    return next((k for k in kernels if k.name == name), None)


def cuda_reference(target: str, references: dict[str, str], option: str | None) -> str:
    """The reference for a CUDA target: `--reference` wins over the config, else TargetError."""
    ref = option or references.get(target)
    if ref is None:
        raise TargetError(f"`{target}` is a CUDA kernel and no PyTorch reference is named",
                          reference_hint(target))
    return ref
