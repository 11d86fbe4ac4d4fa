"""Reference outputs: computed once per task in the sandboxed harness, reused every turn.

A `ReferenceSet` owns two temporary directories: one with each trial's inputs and the
module's state_dict tensors (handed to kernel children, read-only), and a separate one
with the expected outputs (read only by the parent, never in a kernel child's view).
Close it, or use it as a context manager; a finalizer removes the directories.

Trials: one per `task.seeds` entry ("normal"), then stress trials: large magnitude
(x10, random signs), offsets (x + 100, x - 100), an overflow scale per dtype (values
reaching twice the point where `exp` overflows in the input dtype, where a softmax
without max-subtraction turns to inf/NaN), and special values (exact zeros of both
signs, ties, +-1 and the dtype's smallest normal; `children/stress.py`), where a NaN in the
reference marks an input outside the operator's domain. Every seed is drawn from `secrets` per
reference set, so no kernel can know them in advance; they are recorded in each trial
and hence in the result's TrialStats afterwards. The order the kernel sees trials in is
shuffled by the backend.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from nkibot.task import Task
from nkibot.verify.client import run_harness
from nkibot.verify.hints import explain
from nkibot.verify.launch import Limits, cores
from nkibot.verify.protocol import (
    LOW_PRECISION,
    NUMPY_DTYPES,
    ArrayFile,
    BadArrayFile,
    finfo,
    is_float,
    load_array,
    read_plain,
)
from nkibot.verify.sandbox import Confinement
from nkibot.verify.stats import SPECIAL_LABEL
from nkibot.verify.zygote import workdir

LARGE_SCALE = 10.0
OFFSET = 100.0
#: Input dtypes too coarse for a +-100 offset to leave any signal (the step at 100 is 8).
_NO_OFFSET = frozenset({"float8_e4m3", "float8_e5m2"})


class ReferenceRunError(RuntimeError):
    """The reference module could not be run (it raised, crashed, hung or ran out of memory)."""


@dataclass(frozen=True)
class ReferenceTrial:
    index: int
    seed: int
    label: str  # "normal", "large magnitude", "offset +100", "overflow scale x44.4"...
    inputs: list[ArrayFile]
    expected: list[ArrayFile]  # fp32-run outputs
    native_dtypes: list[str]  # PyTorch's output dtypes on the native inputs
    native_error: str | None = None
    #: per output, max |fp32 reference - float64 run|: the reference's own rounding error
    ref_errors: list[float] = field(default_factory=list)


@dataclass
class ReferenceSet:
    """Per-trial inputs and expected outputs on disk, plus what the outputs must look like."""

    root: Path
    expected_root: Path
    trials: list[ReferenceTrial]
    state: list[ArrayFile]
    low_precision: bool
    isolation: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The operator's FLOPs (PyTorch's FlopCounterMode over the first trial's forward).
    flops: float | None = None

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
    """The reference file to import: the original on disk, else its source written out.

    The child sees the original's folder (its sibling modules import), except when that
    folder holds the runner's own scratch (the temp root, or `/`): shown read-only it would
    cover the mount points of the run's writable folders, and show other runs' files.
    """
    if task.reference_file and Path(task.reference_file).is_file() and shareable_folder(
            Path(task.reference_file).parent):
        return Path(task.reference_file)
    name = Path(task.source_path).name if task.source_path.endswith(".py") else "reference.py"
    path = scratch / name
    path.write_text(task.reference_source, encoding="utf-8")
    return path


def reference_folders(path: Path) -> tuple[Path, ...]:
    """The folder a conversion's children are shown when they import `path` in place
    (`reference_path`), for a warm sandbox's view, which is fixed when it starts."""
    return shown_folders(Path(path).resolve().parent)


def shown_folders(folder: Path) -> tuple[Path, ...]:
    """`folder`, if a sandboxed child may be shown it (`shareable_folder`)."""
    found = Path(folder).resolve()
    return (found,) if shareable_folder(found) else ()


def shareable_folder(folder: Path) -> bool:
    """Whether a sandboxed child may be shown `folder`: not the temp root or one above it."""
    temp, found = Path(tempfile.gettempdir()).resolve(), folder.resolve()
    return found != temp and found not in temp.parents


def overflow_x(dtypes: Sequence[str]) -> float:
    """The smallest x at which exp(x) overflows among the float input dtypes."""
    found = [math.log(float(finfo(NUMPY_DTYPES[d]).max)) for d in dtypes
             if is_float(d) and d in NUMPY_DTYPES and d != "float64"]
    return min(found, default=math.log(float(np.finfo(np.float32).max)))


def trial_plan(task: Task, draw: Any = secrets.randbits) -> list[dict[str, Any]]:
    """Every trial's secret seed, label and input transform (see the module docstring)."""
    dtypes = [s.dtype for s in task.inputs]
    plan: list[dict[str, Any]] = [{"seed": draw(31), "label": "normal", "kind": None}
                                  for _ in task.seeds]
    plan.append({"seed": draw(31), "label": "large magnitude", "kind": "scale",
                 "value": LARGE_SCALE})
    if not any(d in _NO_OFFSET for d in dtypes):
        plan += [{"seed": draw(31), "label": f"offset {sign}{OFFSET:g}", "kind": "offset",
                  "value": float(f"{sign}1") * OFFSET} for sign in "+-"]
    # Standard normals times x/2: about 5% of elements beyond x, the largest near 2x.
    scale = overflow_x(dtypes) / 2
    plan.append({"seed": draw(31), "label": f"overflow scale x{scale:.3g}", "kind": "scale",
                 "value": scale})
    # Last, so that a reference refusing special values drops it without renumbering.
    plan.append({"seed": draw(31), "label": SPECIAL_LABEL, "kind": "special"})
    return plan


def compute_reference(task: Task, *, timeout_s: float = 120.0,
                      memory_mb: int | None = 8192) -> ReferenceSet:
    """Run the reference for every trial in the sandbox; raise ReferenceRunError if it fails."""
    warm = workdir()
    root = Path(tempfile.mkdtemp(prefix="nkibot-ref-", dir=warm))
    expected_root = Path(tempfile.mkdtemp(prefix="nkibot-exp-", dir=warm))
    try:
        for sub in ("inputs", "state", "src"):
            (root / sub).mkdir()
        source = reference_path(task, root / "src")
        request = {
            "op": "reference",
            "reference_path": str(source),
            "entry_point": task.entry_point,
            "init_args": task.init_args,
            "init_kwargs": task.init_kwargs,
            "inputs": [s.model_dump() for s in task.inputs],
            "has_get_inputs": task.has_get_inputs,
            "plan": trial_plan(task),
            "inputs_dir": str(root / "inputs"),
            "state_dir": str(root / "state"),
            "expected_dir": str(expected_root),
            # nothing else of the conversion runs beside the reference: its torch may use
            # every core (the kernel children and the other torch children keep to one)
            "threads": cores(),
        }
        confinement = Confinement(readable=(source.parent,), writable=(
            root / "inputs", root / "state", expected_root))
        reply = run_harness(request, timeout_s=timeout_s, memory_mb=memory_mb,
                            extra_env=harness_env(task), confinement=confinement)
        if warm is not None:
            root, expected_root = _take_back(root, expected_root)
        if reply.response is None or not reply.response.get("ok"):
            raise ReferenceRunError(f"{task.entry_point}: " + explain(
                reply.failure(), memory_mb, Limits.fsize_mb))
        trials, state = _read_back(task, reply.response, root, expected_root)
    except BaseException:
        _remove(root, expected_root)
        raise
    return ReferenceSet(
        root=root, expected_root=expected_root, trials=trials, state=state,
        low_precision=any(s.dtype in LOW_PRECISION for s in task.inputs),
        isolation=list(reply.outcome.isolation), seconds=reply.outcome.seconds,
        flops=_flops(reply.response["trials"]))


def _read_back(task: Task, response: dict[str, Any], root: Path,
               expected_root: Path) -> tuple[list[ReferenceTrial], list[ArrayFile]]:
    """The trials and state the child wrote, each file checked as a plain array.

    A file that is not one (a FIFO, a link, a pickle, a truncated header), or a reply that
    does not describe them, ends in ReferenceRunError naming the cause: a refusal, never
    an uncaught BadArrayFile or OSError."""
    try:
        _seal(root, expected_root)
        trials = [_trial(i, t, root / "inputs", expected_root)
                  for i, t in enumerate(response["trials"])]
        state = [_own(root / "state", f"state{i}.npy", d)
                 for i, d in enumerate(response["state"])]
    except (BadArrayFile, OSError) as exc:
        raise ReferenceRunError(f"{task.entry_point}: the reference child's output was "
                                f"refused: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ReferenceRunError(f"{task.entry_point}: the reference child's reply does not "
                                f"describe its outputs ({type(exc).__name__}: {exc})") from exc
    return trials, state


def _flops(trials: list[Any]) -> float | None:
    """The first trial's FLOP count, when the child gave a plain non-negative number."""
    found = trials[0].get("flops") if trials and isinstance(trials[0], dict) else None
    ok = isinstance(found, int | float) and not isinstance(found, bool) and found >= 0
    return float(found) if ok and math.isfinite(float(found)) else None  # type: ignore[arg-type]


def _take_back(*roots: Path) -> list[Path]:
    """Move the run's folders out of the warm sandbox's work directory (sealed first), to
    the temp root: no later run forked there can rename or replace them."""
    _seal(*roots)
    moved = []
    for root in roots:
        target = Path(tempfile.mkdtemp(prefix=root.name.rsplit("-", 1)[0] + "-"))
        root.replace(target)
        moved.append(target)
    return moved


def _seal(*roots: Path) -> None:
    """Give the reference child's files back to the runner: no sandbox uid owns them."""
    if os.geteuid() != 0:
        return
    for root in roots:
        for path in (root, *root.rglob("*")):
            os.chown(path, 0, 0, follow_symlinks=False)
    roots[-1].chmod(0o700)  # expected outputs: the parent's alone


def _own(directory: Path, name: str, claimed: dict[str, Any]) -> ArrayFile:
    """A descriptor for the parent's own file: the child's path is ignored, the file checked."""
    descriptor: ArrayFile = {"file": str(directory / name), "dtype": str(claimed["dtype"]),
                             "shape": [int(n) for n in claimed["shape"]]}
    read_plain(Path(descriptor["file"]), descriptor["dtype"], descriptor["shape"])
    return descriptor


def _trial(index: int, raw: dict[str, Any], inputs: Path, expected: Path) -> ReferenceTrial:
    return ReferenceTrial(
        index=index, seed=int(raw["seed"]), label=str(raw["label"]),
        inputs=[_own(inputs, f"trial{index}_in{i}.npy", d) for i, d in enumerate(raw["inputs"])],
        expected=[_own(expected, f"trial{index}_out{k}.npy", d)
                  for k, d in enumerate(raw["expected"])],
        native_dtypes=[str(d) for d in raw["native_dtypes"]],
        native_error=raw.get("native_error"),
        ref_errors=[float(e) for e in raw.get("ref_errors", [])
                    if isinstance(e, int | float) and math.isfinite(e) and e >= 0])
