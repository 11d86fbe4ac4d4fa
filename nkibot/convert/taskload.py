"""Load a Task from a reference file: KernelBench convention or explicit shapes.

KernelBench files define `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`; plain modules and functions work too when every forward input's
shape is given (`--shape x=128x256xfloat32`). The reference is imported only inside the
sandboxed harness (`describe`); this process parses the file to name what it holds.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any, Literal, get_args

from nkibot.config.targets import ShapeOverride

# One parser for `NAME=DIMSxDTYPE`, shared with `/nki convert --shape` and the repo config.
from nkibot.convert.discovery import TargetError, discover, triton_launcher
from nkibot.task import Dtype, InputSpec, Task, Tolerance, default_tolerances
from nkibot.verify.client import run_harness
from nkibot.verify.reference import harness_env, reference_path
from nkibot.verify.sandbox import Confinement
from nkibot.verify.zygote import workdir

DTYPES: frozenset[str] = frozenset(get_args(Dtype))


class TaskLoadError(Exception):
    """A user-facing problem loading a task: what went wrong and what to do about it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(f"{message}. {hint}" if hint else message)
        self.message = message
        self.hint = hint


def _definitions(src: str) -> tuple[list[str], list[str]]:
    tree = ast.parse(src)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                 and n.name not in ("get_inputs", "get_init_inputs")]
    return classes, functions


def _read(path: Path, name: str, shown: str) -> str:
    if not path.is_file():
        raise TaskLoadError(f"{shown} does not exist", "check the path before '::'")
    if path.suffix != ".py":
        raise TaskLoadError(f"{shown} is not a Python file", "point at a .py file")
    src = path.read_text(encoding="utf-8", errors="replace")
    try:
        classes, functions = _definitions(src)
    except SyntaxError as exc:
        raise TaskLoadError(f"{shown} has a syntax error at line {exc.lineno}",
                            str(exc.msg)) from exc
    if name not in classes + functions:
        found = ", ".join(classes + functions) or "none"
        raise TaskLoadError(f"{name!r} is not defined at the top level of {shown}",
                            f"classes and functions found: {found}")
    return src


def _describe(task: Task, timeout_s: float) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nkibot-desc-", dir=workdir()) as scratch:
        source = reference_path(task, Path(scratch))
        request = {"op": "describe", "reference_path": str(source),
                   "entry_point": task.entry_point, "init_kwargs": task.init_kwargs}
        reply = run_harness(request, timeout_s=timeout_s, extra_env=harness_env(task),
                            confinement=Confinement(readable=(source.parent,)))
    if reply.response is None or not reply.response.get("ok"):
        raise TaskLoadError(f"cannot describe {task.entry_point} from {task.source_path}",
                            reply.failure())
    return reply.response


def _inputs(described: dict[str, Any], shapes: list[ShapeOverride], target: str
            ) -> list[InputSpec]:
    names: list[str] = list(described.get("param_names", []))
    found = described.get("inputs")
    specs = [InputSpec(**s) for s in found] if found is not None else []
    by_name = {o.name: o for o in shapes}
    unknown = [n for n in by_name if n not in names and n not in {s.name for s in specs}]
    if unknown:
        raise TaskLoadError(f"--shape names {', '.join(unknown)} are not inputs of {target}",
                            f"forward inputs: {', '.join(names) or 'none'}")
    if found is None:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise TaskLoadError(f"{target} has no get_inputs() and no shape for "
                                f"{', '.join(missing)}",
                                "give each with --shape NAME=DIMSxDTYPE, e.g. x=128x256xfloat32")
        specs = [InputSpec(name=n, shape=(), dtype="float32") for n in names]
    out = []
    for spec in specs:
        o = by_name.get(spec.name)
        out.append(spec if o is None else InputSpec(name=o.name, shape=o.shape, dtype=o.dtype))
    return out


def _entry(src: str, name: str, shown: str) -> tuple[str, Literal["module", "triton"]]:
    """What the harness runs for `name`: itself, or a Triton kernel's launcher function.

    A @triton.jit kernel is run through the plain function in its file that launches it,
    on Triton's CPU interpreter (TRITON_INTERPRET=1 in the harness child's environment).
    """
    if not any(c.name == name and c.kind == "triton" for c in discover(src).candidates):
        return name, "module"  # refined from the harness's description
    if importlib.util.find_spec("triton") is None:
        raise TaskLoadError(
            f"{name!r} in {shown} is a @triton.jit kernel, and `triton` is not installed to "
            "run it on Triton's CPU interpreter",
            "pip install triton, or point at a PyTorch module or function that computes "
            "the same thing")
    try:
        return triton_launcher(src, name, shown), "triton"
    except TargetError as exc:
        raise TaskLoadError(exc.message, exc.hint) from exc


def load_task(path: Path, name: str, *, shapes: list[ShapeOverride] | None = None,
              tolerance: Tolerance | None = None, turns: int | None = None,
              compile_timeout_s: float = 120.0, display_path: str | None = None) -> Task:
    """Read `path`, describe `name` in the sandbox, and build the Task (see module doc)."""
    shown = display_path or str(path)
    src = _read(path, name, shown)
    for override in shapes or []:
        if override.dtype not in DTYPES:
            raise TaskLoadError(f"bad dtype {override.dtype!r} for {override.name}",
                                f"one of {', '.join(sorted(DTYPES))}")
    entry, kind = _entry(src, name, shown)
    task = Task(reference_source=src, entry_point=entry, source_path=shown, kind=kind,
                reference_file=str(path.resolve()), compile_timeout_s=compile_timeout_s)
    described = _describe(task, timeout_s=max(compile_timeout_s, 60.0))
    tolerances = default_tolerances()
    if tolerance is not None:
        tolerances = dict.fromkeys(tolerances, tolerance)
    update: dict[str, Any] = {
        "kind": kind if kind == "triton" else described.get("kind", "module"),
        "init_args": list(described.get("init_args", [])),
        "inputs": _inputs(described, shapes or [], f"{shown}::{entry}"),
        "has_get_inputs": bool(described.get("has_get_inputs")),
        "state_dict": [InputSpec(**s) for s in described.get("state_dict", [])],
        "tolerances": tolerances,
    }
    if turns is not None:
        update["max_turns"] = turns
    return Task.model_validate({**task.model_dump(), **update})
