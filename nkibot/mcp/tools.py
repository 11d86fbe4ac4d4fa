"""What each MCP tool does: a thin call into the code the CLI and the runner use.

Every function here is synchronous and may be slow (it runs sandboxed children); the
server runs them in worker threads. Bad input raises `ToolInputError` with what went
wrong and what to do; a kernel that fails is a result, not an error.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.backends.base import KernelBackend
from nkibot.config.settings import Settings
from nkibot.config.targets import ShapeOverride, parse_shape
from nkibot.mcp.discover import discover_tree
from nkibot.mcp.workspace import ToolInputError, Workspace
from nkibot.results import ConversionResult
from nkibot.task import Task

#: The most bytes `simulate`'s random inputs may take, checked before they are made.
MAX_INPUT_BYTES = 512 * 1024 * 1024
#: Source size an IDE agent may send (a kernel file, not a repository).
MAX_CODE_BYTES = 512 * 1024


@dataclass
class Tools:
    """The tool implementations over one workspace and one set of settings."""

    workspace: Workspace
    settings: Settings
    #: The Trainium generation kernels are checked for (the host's, unless a call says).
    platform: str = "trn1"
    backend_factory: Callable[[str | None], KernelBackend] | None = None
    _tasks: dict[tuple[str, tuple[str, ...]], Task] = field(default_factory=dict)

    # --- inputs -------------------------------------------------------------------
    def shapes(self, shapes: list[str] | None) -> list[ShapeOverride]:
        try:
            return [parse_shape(s) for s in shapes or []]
        except ValueError as exc:
            raise ToolInputError(f"bad shape: {exc}; use NAME=DIMSxDTYPE, "
                                 "e.g. x=128x256xfloat32") from exc

    def task(self, target: str, shapes: list[str] | None = None,
             turns: int | None = None) -> Task:
        """The Task for `FILE::Name` (cached per target and shapes: describing is a child)."""
        from nkibot.convert.taskload import TaskLoadError, load_task

        path, name = self.workspace.target(target)
        key = (target, tuple(shapes or ()))
        if key not in self._tasks:
            try:
                self._tasks[key] = load_task(
                    path, name, shapes=self.shapes(shapes) or None,
                    compile_timeout_s=self.settings.compile_timeout_s,
                    display_path=self.workspace.relative(path))
            except TaskLoadError as exc:
                hint = f" ({exc.hint})" if exc.hint else ""
                raise ToolInputError(f"cannot load {target}: {exc}{hint}") from exc
        task = self._tasks[key]
        return task if turns is None else task.model_copy(update={"max_turns": turns})

    def backend(self, function: str | None = None) -> KernelBackend:
        if self.backend_factory is not None:
            return self.backend_factory(function)
        from nkibot.backends.select import select_backend

        if function is None:
            return select_backend("auto", compile_timeout_s=self.settings.compile_timeout_s,
                                  platform=self.platform)
        from nkibot.backends.sim import SimBackend

        return SimBackend(function=function, platform=self.platform)

    # --- tools ----------------------------------------------------------------------
    def discover(self, path: str) -> dict[str, Any]:
        root = self.workspace.resolve(path, what="path")
        return discover_tree(self.workspace, root, describe=self._describe)

    def _describe(self, target: str) -> list[dict[str, Any]] | None:
        try:
            task = self.task(target)
        except ToolInputError:
            return None
        return [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in task.inputs]

    def compile(self, code: str, target: str, shapes: list[str] | None = None
                ) -> dict[str, Any]:
        src = checked_code(code)
        task = self.task(target, shapes)
        result = self.backend().compile(src, task)
        return result.model_dump(mode="json")

    def verify(self, code: str, target: str, trials: int = 5,
               shapes: list[str] | None = None) -> dict[str, Any]:
        from nkibot.verify.check import (
            KernelSourceError,
            check_kernel,
            published,
            resolve_function,
            static_rejection,
        )

        if not 1 <= trials <= 50:
            raise ToolInputError(f"trials must be between 1 and 50, got {trials}")
        src = checked_code(code)
        try:
            function = resolve_function(src, None)
        except KernelSourceError as exc:
            raise ToolInputError(str(exc)) from exc
        backend = self.backend(function)
        static = static_rejection(src, target, "kernel.py", function, backend.name)
        if static is None:
            task = self.task(target, shapes).model_copy(update={"seeds": list(range(trials))})
            static = check_kernel(task, src, "kernel.py", backend, function)
        return published(static, self.platform).model_dump(mode="json")

    def profile(self, code: str, target: str, shapes: list[str] | None = None
                ) -> dict[str, Any]:
        src = checked_code(code)
        backend = self.backend()
        result = backend.profile(src, self.task(target, shapes))
        where = "hardware measurement" if result.hardware else "simulator estimate"
        return {"source": where, "backend": backend.name, "platform": self.platform,
                **result.model_dump(mode="json")}

    def simulate(self, code: str, inputs: list[str] | None = None,
                 shapes: list[str] | None = None, seed: int = 0,
                 out_dir: str | None = None) -> dict[str, Any]:
        from nkibot.backends.sim import SimBackend

        src = checked_code(code)
        backend = SimBackend(platform=self.platform)
        if shapes and not inputs:
            # Random inputs are built in the sandboxed child, after the size check here.
            specs = self._random_specs(shapes)
            run = backend.simulate(src, [], [s.name for s in specs], seed=seed,
                                   random=[(list(s.shape), s.dtype) for s in specs])
        else:
            arrays, names = self._file_inputs(inputs, shapes)
            run = backend.simulate(src, arrays, names)
        if run.error is not None:
            return {"ok": False, "error": run.error, "line": run.line,
                    "simulator": run.simulator, "platform": self.platform}
        written: list[str] = []
        if out_dir is not None:
            for i, out in enumerate(run.outputs):
                buffer = io.BytesIO()
                np.save(buffer, out, allow_pickle=False)
                path = self.workspace.write(out_dir, f"output{i}.npy", buffer.getvalue())
                written.append(self.workspace.relative(path))
        return {"ok": True, "simulator": run.simulator, "platform": self.platform,
                "stats": run.stats,
                "outputs": [output_stats(o) for o in run.outputs], "written": written}

    def _file_inputs(self, inputs: list[str] | None, shapes: list[str] | None
                     ) -> tuple[list[np.ndarray[Any, Any]], list[str]]:
        """`.npy` inputs from the workspace, their sizes checked before any is loaded."""
        if inputs and shapes:
            raise ToolInputError("give either inputs (.npy files) or shapes, not both")
        if not inputs:
            raise ToolInputError("give inputs (.npy files) or shapes (NAME=DIMSxDTYPE)")
        files = [self.workspace.resolve(p, what="input") for p in inputs]
        try:
            size = sum(f.stat().st_size for f in files)
            if size > MAX_INPUT_BYTES:
                raise ToolInputError(f"the inputs take {size / 2**20:.0f} MiB, more than "
                                     f"{MAX_INPUT_BYTES // 2**20} MiB; use smaller inputs")
            return [np.load(f, allow_pickle=False) for f in files], [f.stem for f in files]
        except (OSError, ValueError, MemoryError) as exc:
            raise ToolInputError(f"cannot read an input as .npy: {exc}") from exc

    def _random_specs(self, shapes: list[str]) -> list[ShapeOverride]:
        """The specs of seeded random inputs, refused above MAX_INPUT_BYTES in all before
        anything is allocated (the sandboxed child builds the arrays)."""
        from nkibot.verify.protocol import NUMPY_DTYPES

        specs = self.shapes(shapes)
        for s in specs:
            if s.dtype not in NUMPY_DTYPES:
                raise ToolInputError(f"unsupported dtype {s.dtype!r} for {s.name}")
        size = sum(math.prod(s.shape) * NUMPY_DTYPES[s.dtype].itemsize for s in specs)
        if size > MAX_INPUT_BYTES:
            raise ToolInputError(f"the inputs would take {size / 2**20:.0f} MiB, more than "
                                 f"{MAX_INPUT_BYTES // 2**20} MiB; use smaller shapes")
        return specs

    def lookup(self, topic: str) -> str:
        from nkibot.convert.agent.knowledge import lookup

        if not topic.strip():
            raise ToolInputError("topic is empty; e.g. 'matmul psum' or 'reductions'")
        return lookup(topic, limit=3)

    def emit(self, result: dict[str, Any], out_dir: str) -> dict[str, Any]:
        from pydantic import ValidationError

        from nkibot.github.artifacts import local_output_files

        try:
            parsed = ConversionResult.model_validate(result)
        except ValidationError as exc:
            raise ToolInputError(f"result is not a conversion result (from convert or "
                                 f"verify): {exc.error_count()} problems") from exc
        if parsed.kernel is None:
            raise ToolInputError("the result holds no kernel to write")
        kernel_rel = Path(parsed.kernel.path)
        if kernel_rel.is_absolute() or ".." in kernel_rel.parts:
            raise ToolInputError(f"kernel path {parsed.kernel.path!r} must be relative")
        folder = self.workspace.root.joinpath(*self.workspace.parts(out_dir, what="out_dir"))
        shapes = [f"{a.name}={'x'.join(map(str, a.shape))}x{a.dtype}"
                  for a in parsed.kernel.args if a.source == "input" and a.shape]
        task = self.task(parsed.target, shapes or None)
        written = [self.workspace.write(out_dir, rel, text.encode())
                   for rel, text in local_output_files(parsed, task, folder)
                   if not (rel.name == "pytest.ini" and (folder / rel).is_file())]
        return {"written": [self.workspace.relative(p) for p in written]}


def checked_code(code: str) -> str:
    """The kernel source, or a clear error when it is empty, too big or not Python."""
    import ast

    if not code.strip():
        raise ToolInputError("code is empty: send the whole kernel file")
    if len(code.encode("utf-8")) > MAX_CODE_BYTES:
        raise ToolInputError(f"code is over {MAX_CODE_BYTES // 1024} KiB: send one kernel file")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise ToolInputError(f"code does not parse as Python: line {exc.lineno}: "
                             f"{exc.msg}") from exc
    return code if code.endswith("\n") else code + "\n"


def checked_generation(requested: str | None, setting: str | None) -> str:
    """The generation to check for: the call's, else the setting's, else the host's."""
    from nkibot.backends.select import host_platform
    from nkibot.config.platform import PlatformError

    try:
        return host_platform(requested, setting)
    except PlatformError as exc:
        raise ToolInputError(f"target_generation: {exc}") from exc


def output_stats(array: np.ndarray[Any, Any]) -> dict[str, Any]:
    """Shape, dtype and summary statistics of one output (fp32 view for low precision)."""
    from nkibot.verify.protocol import dtype_name

    data = array.astype(np.float64)
    finite = data[np.isfinite(data)]
    return {"shape": list(array.shape), "dtype": dtype_name(array.dtype),
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "mean": float(finite.mean()) if finite.size else None,
            "std": float(finite.std()) if finite.size else None,
            "nan": int(np.isnan(data).sum()), "inf": int(np.isinf(data).sum())}
