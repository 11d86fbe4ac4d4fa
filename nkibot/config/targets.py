"""Target (`path::Name`) and shape (`x=4x128xbf16`) syntax, validated without any I/O."""

from __future__ import annotations

import re

from pydantic import BaseModel

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_PART = re.compile(r"^[A-Za-z0-9_.\-]+$")
DTYPES = {
    "float32": "float32", "fp32": "float32", "f32": "float32",
    "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float8_e4m3": "float8_e4m3", "fp8_e4m3": "float8_e4m3",
    "float8_e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2",
    "int32": "int32", "int64": "int64", "int16": "int16", "int8": "int8", "uint8": "uint8",
    "bool": "bool",
}
MAX_TARGETS = 20
CUDA_SUFFIXES = (".cu", ".cuh")
TARGET_SUFFIXES = (".py", *CUDA_SUFFIXES)
MAX_DIMS = 8


class ShapeOverride(BaseModel):
    """One input's shape (and dtype), as `x=4x128xbf16` names it; Jobs carry them."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"


class TargetError(ValueError):
    """A user-supplied target or shape is malformed; the message says how, in one line."""


def validate_target(text: str) -> str:
    """`path/to/file.py::Name` (or a `.cu`/`.cuh` kernel) normalised, or TargetError saying why."""
    path, sep, name = text.strip().partition("::")
    if not sep:
        raise TargetError(f"`{text}` is not `path/to/file.py::Name`")
    if not _IDENT.match(name):
        raise TargetError(f"`{name}` in `{text}` is not a Python identifier")
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        raise TargetError(f"`{path}` must be relative to the repository root")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise TargetError(f"`{path}` may not contain empty, `.` or `..` segments")
    if not all(_PATH_PART.match(part) for part in parts):
        raise TargetError(f"`{path}` has characters other than letters, digits, `_.-` and `/`")
    if not path.endswith(TARGET_SUFFIXES):
        raise TargetError(f"`{path}` is not a `.py`, `.cu` or `.cuh` file")
    return f"{path}::{name}"


def is_cuda_target(target: str) -> bool:
    """A kernel in a CUDA source file (`.cu`, `.cuh`); it converts against a PyTorch reference."""
    return target.partition("::")[0].endswith(CUDA_SUFFIXES)


def validate_reference(text: str) -> str:
    """A PyTorch reference (`path/to/file.py::Module`): a target in a Python file."""
    target = validate_target(text)
    if not target.partition("::")[0].endswith(".py"):
        raise TargetError(f"the reference `{text}` must be a PyTorch module in a `.py` file")
    return target


def parse_shape(text: str) -> ShapeOverride:
    """`x=4x128xbf16` -> ShapeOverride(name="x", shape=(4, 128), dtype="bfloat16")."""
    name, sep, spec = text.partition("=")
    if not sep or not _IDENT.match(name):
        raise TargetError(f"`{text}` is not `NAME=DIMSxDTYPE` (for example `x=4x128xbf16`)")
    tokens = spec.lower().split("x")
    dtype = "float32"
    if tokens and tokens[-1][:1].isdigit() and not tokens[-1].isdigit():
        # `128by256`: a dim mistyped, not a dtype
        raise TargetError(f"`{tokens[-1]}` in `{text}` is not a dim: separate dims with `x` "
                          "and end with an optional dtype, for example `x=128x256xfloat32`")
    if tokens and not tokens[-1].isdigit():
        dtype_name = tokens.pop()
        if dtype_name not in DTYPES:
            raise TargetError(f"unknown dtype `{dtype_name}` in `{text}`: use NAME=DIMSxDTYPE "
                              f"with a dtype among {', '.join(sorted(set(DTYPES.values())))}")
        dtype = DTYPES[dtype_name]
    if not tokens or not all(t.isdigit() and 0 < int(t) <= 1 << 20 for t in tokens):
        raise TargetError(f"`{spec}` needs positive integer dims: use NAME=DIMSxDTYPE, "
                          "for example `x=4x128xbf16`")
    if len(tokens) > MAX_DIMS:
        raise TargetError(f"`{spec}` has more than {MAX_DIMS} dims")
    return ShapeOverride(name=name, shape=tuple(int(t) for t in tokens), dtype=dtype)


def reference_hint(target: str) -> str:
    """How to name the PyTorch reference a CUDA kernel must match (shown to the user)."""
    return (
        f"`{target}` is a CUDA kernel: nkibot converts it against a PyTorch module that "
        "computes the same thing. Name one inline, e.g.\n\n"
        f"`/nki convert {target} --reference models/norm.py::RMSNorm`\n\n"
        "or in `.github/nki-bot.yml`:\n\n```yaml\nreferences:\n"
        f"  {target}: models/norm.py::RMSNorm\n```"
    )
