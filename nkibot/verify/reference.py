"""Reference outputs: computed once per task in the sandboxed harness, reused every turn.

A `ReferenceSet` owns two temporary directories: one with each trial's inputs and the
module's state_dict tensors (handed to kernel children), and a separate one with the
expected outputs (read only by the parent, never named to a kernel). Close it, or use it
as a context manager; a finalizer removes the directories if neither happens.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from nkibot.task import Task
from nkibot.verify.harness import run_harness
from nkibot.verify.protocol import LOW_PRECISION, load_array

LARGE_SCALE = 10.0


class ReferenceRunError(RuntimeError):
    """The reference module could not be run (it raised, crashed, hung or ran out of memory)."""


@dataclass(frozen=True)
class ReferenceTrial:
    index: int
    seed: int
    label: str  # "normal" or "large magnitude"
    inputs: list[dict[str, Any]]  # array descriptors (file, dtype, shape)
    expected: list[dict[str, Any]]  # fp32-run outputs
    native_dtypes: list[str]  # PyTorch's output dtypes on the native inputs
    native_error: str | None = None


@dataclass
class ReferenceSet:
    """Per-trial inputs and expected outputs on disk, plus what the outputs must look like."""

    root: Path
    expected_root: Path
    trials: list[ReferenceTrial]
    state: list[dict[str, Any]]
    low_precision: bool
    isolation: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, _remove, self.root, self.expected_root)

    @property
    def output_count(self) -> int:
        return len(self.trials[0].expected) if self.trials else 0

    def expected(self, trial: int, output: int) -> np.ndarray[Any, Any]:
        return load_array(self.trials[trial].expected[output])

    def inputs(self, trial: int) -> list[np.ndarray[Any, Any]]:
        return [load_array(d) for d in self.trials[trial].inputs]

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> ReferenceSet:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _remove(*paths: Path) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def harness_env(task: Task) -> dict[str, str] | None:
    """Extra environment for a harness child that imports the reference.

    A Triton target's launcher runs on Triton's CPU interpreter, which Triton reads from
    the environment; being set at process start, it is in place before triton is imported.
    """
    return {"TRITON_INTERPRET": "1"} if task.kind == "triton" else None


def reference_path(task: Task, scratch: Path) -> Path:
    """The reference file to import: the original on disk, else its source written out."""
    if task.reference_file and Path(task.reference_file).is_file():
        return Path(task.reference_file)
    name = Path(task.source_path).name if task.source_path.endswith(".py") else "reference.py"
    path = scratch / name
    path.write_text(task.reference_source, encoding="utf-8")
    return path


def compute_reference(task: Task, *, timeout_s: float = 120.0,
                      memory_mb: int | None = 8192) -> ReferenceSet:
    """Run the reference for every trial in the sandbox; raise ReferenceRunError if it fails."""
    root = Path(tempfile.mkdtemp(prefix="nkibot-ref-"))
    expected_root = Path(tempfile.mkdtemp(prefix="nkibot-exp-"))
    try:
        for sub in ("inputs", "state", "src"):
            (root / sub).mkdir()
        request = {
            "op": "reference",
            "reference_path": str(reference_path(task, root / "src")),
            "entry_point": task.entry_point,
            "init_args": task.init_args,
            "init_kwargs": task.init_kwargs,
            "inputs": [s.model_dump() for s in task.inputs],
            "has_get_inputs": task.has_get_inputs,
            "seeds": task.seeds,
            "large_seed": (max(task.seeds) if task.seeds else 0) + 1000,
            "large_scale": LARGE_SCALE,
            "inputs_dir": str(root / "inputs"),
            "state_dir": str(root / "state"),
            "expected_dir": str(expected_root),
        }
        reply = run_harness(request, timeout_s=timeout_s, memory_mb=memory_mb,
                            extra_env=harness_env(task))
        if reply.response is None or not reply.response.get("ok"):
            raise ReferenceRunError(f"{task.entry_point}: {reply.failure()}")
        trials = [ReferenceTrial(index=i, seed=int(t["seed"]), label=str(t["label"]),
                                 inputs=t["inputs"], expected=t["expected"],
                                 native_dtypes=list(t["native_dtypes"]),
                                 native_error=t.get("native_error"))
                  for i, t in enumerate(reply.response["trials"])]
    except BaseException:
        _remove(root, expected_root)
        raise
    return ReferenceSet(
        root=root, expected_root=expected_root, trials=trials, state=reply.response["state"],
        low_precision=any(s.dtype in LOW_PRECISION for s in task.inputs),
        isolation=list(reply.outcome.isolation), seconds=reply.outcome.seconds)
