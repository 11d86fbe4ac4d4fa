"""What the harness parent and its children agree on: requests, replies, array files.

Replies are TypedDicts (standard library only, so the children stay light); the parent
turns the raw JSON into one of them at the boundary (`nkibot.verify.client`) and treats
every field a kernel child sends as a claim, never as a verdict.

Arrays travel as `.npy` files loaded with `allow_pickle=False`. NumPy cannot describe
ml_dtypes types (bfloat16, float8) in a `.npy` header, so those are stored as their raw
bits (uint16/uint8). A kernel child's outputs go to fixed names in a directory the parent
made, `t{trial}_o{output}.{dtype}.npy`: the parent parses the name itself, reads the file
without following links, and checks that the header's dtype is exactly that dtype's
storage. This module imports neither torch nor pydantic.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

#: ml_dtypes' types, by our name and ml_dtypes' attribute. A process that handles only
#: NumPy's own dtypes (the parent, the describe and reference children of a float32 module)
#: never imports ml_dtypes (0.7.0 costs 0.45-1.4 s of CPU to import; pyproject.toml).
_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3": "float8_e4m3fn",
              "float8_e5m2": "float8_e5m2"}


class _DtypeTable(Mapping[str, "np.dtype[Any]"]):
    """Our dtype names -> NumPy dtypes; ml_dtypes' are resolved on first use."""

    def __init__(self, native: dict[str, np.dtype[Any]]) -> None:
        self._native = native
        self._names = [*native, *_ML_DTYPES]

    def __getitem__(self, name: str) -> np.dtype[Any]:
        if name in self._native:
            return self._native[name]
        if name not in _ML_DTYPES:
            raise KeyError(name)
        import ml_dtypes

        found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._native or name in _ML_DTYPES

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def finfo(dtype: np.dtype[Any]) -> Any:
    """Machine limits of a float dtype, NumPy's or ml_dtypes' (ml_dtypes before 0.7 does not
    teach `np.finfo` its types; `ml_dtypes.finfo` handles both, and is imported only for
    its own)."""
    if dtype.kind == "f":
        return np.finfo(dtype)
    import ml_dtypes

    limits: Any = ml_dtypes.finfo  # untyped in some releases
    return limits(dtype)


#: Our dtype names -> NumPy dtypes (ml_dtypes for the ones NumPy lacks).
NUMPY_DTYPES: Mapping[str, np.dtype[Any]] = _DtypeTable({
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
})
_BITS = {"bfloat16": np.uint16, "float8_e4m3": np.uint8, "float8_e5m2": np.uint8}
LOW_PRECISION = frozenset({"bfloat16", "float16", "float8_e4m3", "float8_e5m2"})


class ArrayFile(TypedDict):
    """Where one array lies, and what it holds."""

    file: str
    dtype: str
    shape: list[int]


class ErrorInfo(TypedDict):
    """A structured exception: what the model and the user see as a diagnostic."""

    kind: str
    type: str
    message: str
    rule: str
    file: str | None
    line: int | None
    fix: str | None
    traceback: str
    trial: NotRequired[int | None]


class InputSpecDict(TypedDict):
    name: str
    shape: list[int]
    dtype: str


class DescribeReply(TypedDict):
    ok: bool
    error: NotRequired[ErrorInfo | None]
    kind: NotRequired[Literal["module", "function"]]
    param_names: NotRequired[list[str]]
    inputs: NotRequired[list[InputSpecDict] | None]
    init_args: NotRequired[list[Any]]
    has_get_inputs: NotRequired[bool]
    state_dict: NotRequired[list[InputSpecDict]]


class ReferenceTrialReply(TypedDict):
    seed: int
    label: str
    inputs: list[ArrayFile]
    expected: list[ArrayFile]
    native_dtypes: list[str]
    native_error: str | None


class ReferenceReply(TypedDict):
    ok: bool
    error: NotRequired[ErrorInfo | None]
    state: NotRequired[list[ArrayFile]]
    trials: NotRequired[list[ReferenceTrialReply]]


class KernelReply(TypedDict):
    """What a kernel child claims. Only `error` (feedback) and `stats` are ever used."""

    ok: bool
    error: ErrorInfo | None
    simulator: str | None
    device: str | None
    stats: dict[str, Any]
    #: The cost model's estimate, when the parent asked for one (a model figure, labelled).
    model: NotRequired[dict[str, Any]]


def error_dict(exc: BaseException, kernel_file: str | None = None) -> ErrorInfo:
    """A structured, JSON-able description of an exception (rule/file/line/fix if known)."""
    frames = traceback.extract_tb(exc.__traceback__)
    file = getattr(exc, "file", None)
    line = getattr(exc, "line", None)
    if isinstance(exc, SyntaxError):
        file, line = exc.filename, exc.lineno
    if line is None and kernel_file is not None:
        for frame in reversed(frames):
            if frame.filename == kernel_file:
                file, line = frame.filename, frame.lineno
                break
    rule = getattr(exc, "rule", None) or "kernel-exception"
    if rule == "kernel-exception" and (
            isinstance(exc, MemoryError) or isinstance(exc.__cause__, MemoryError)
            or "MemoryError" in str(exc)):
        rule = "memory-limit"
    tail = "".join(traceback.format_exception(exc)).strip().splitlines()[-12:]
    return {
        "kind": next((c.__name__ for c in type(exc).__mro__ if c.__name__ in _SIM_KINDS),
                     "exception"),
        "type": type(exc).__name__,
        "message": str(exc)[:2000],
        "rule": str(rule),
        "file": str(file) if file is not None else None,
        "line": int(line) if isinstance(line, int) else None,
        "fix": fix if isinstance(fix := getattr(exc, "fix", None), str) else None,
        "traceback": "\n".join(tail),
    }


def problem(kind: str, message: str) -> ErrorInfo:
    """An ErrorInfo for a problem that is not an exception (bad request, bad reference)."""
    return {"kind": "exception", "type": kind, "message": message, "rule": kind,
            "file": None, "line": None, "fix": None, "traceback": ""}


_SIM_KINDS = frozenset({"ConstraintError", "KernelError"})


def dtype_name(dtype: np.dtype[Any]) -> str:
    """Our name for a NumPy dtype ("bfloat16", "float32", ...); NumPy's name otherwise."""
    for name in NUMPY_DTYPES:
        if name in _ML_DTYPES and "ml_dtypes" not in sys.modules:
            break  # an array of an ml_dtypes type exists only once ml_dtypes is imported
        if NUMPY_DTYPES[name] == dtype:
            return name
    else:
        import ml_dtypes

        if dtype == np.dtype(ml_dtypes.float8_e4m3):
            return "float8_e4m3"
    return str(dtype)


def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


def save_array(path: Path, array: np.ndarray[Any, Any]) -> ArrayFile:
    """Save `array` to `path` (.npy) and return its descriptor {file, dtype, shape}."""
    name = dtype_name(array.dtype)
    data = np.asarray(array, order="C")  # ascontiguousarray would make a 0-d result 1-d
    if name in _BITS:
        data = data.view(_BITS[name])
    np.save(path, data, allow_pickle=False)
    return {"file": str(path), "dtype": name, "shape": list(array.shape)}


def load_array(descriptor: ArrayFile) -> np.ndarray[Any, Any]:
    """Load an array saved by `save_array`, checking dtype and shape (`read_plain`)."""
    return read_plain(Path(descriptor["file"]), str(descriptor["dtype"]),
                      list(descriptor["shape"]))


def random_array(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Standard-normal floats (small non-negative integers, random booleans) of one spec."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    target = NUMPY_DTYPES.get(dtype, np.dtype(np.float32))
    if is_float(dtype):
        return rng.standard_normal(shape, dtype=np.float32).astype(target)
    return rng.integers(0, 16, size=shape).astype(target)


def to_kernel_dtype(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """NKI has no 64-bit integers: int64 tensors (class indices, BatchNorm's
    num_batches_tracked) reach kernels as int32. Values outside int32 are refused."""
    if array.dtype != np.int64:
        return array
    info = np.iinfo(np.int32)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise ValueError("an int64 input holds values outside int32, which NKI kernels "
                         "cannot take")
    return array.astype(np.int32)


def output_name(trial: int, output: int, dtype: str) -> str:
    """The fixed file name of one kernel output (see the module docstring)."""
    return f"t{trial}_o{output}.{dtype}.npy"


_OUTPUT = re.compile(r"t(\d{1,4})_o(\d{1,3})\.([a-z0-9_]{2,16})\.npy")


class BadArrayFile(ValueError):
    """A file a child wrote is not a plain array of the dtype its name says."""


#: The most entries the parent looks at in a child's output directory: a run writes a
#: few files per trial, so a directory of thousands is refused before anything is read.
MAX_ENTRIES = 4096


def listing(directory: Path, max_total: int | None = None,
            max_entries: int = MAX_ENTRIES) -> list[str]:
    """The names in a child's output directory, after checking what it left there as a
    whole: at most `max_entries` entries and `max_total` bytes in all (sizes by lstat,
    nothing followed). More is refused (BadArrayFile) before any file is read, so a child
    cannot make the parent list millions of names or read many files each under the
    per-file cap."""
    names: list[str] = []
    total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if len(names) >= max_entries:
                raise BadArrayFile(f"the child left more than {max_entries} entries in its "
                                   "output directory; a run writes a few files a trial")
            names.append(entry.name)
            total += entry.stat(follow_symlinks=False).st_size
            if max_total is not None and total > max_total:
                raise BadArrayFile(f"the child left more than {max_total} bytes in its "
                                   "output directory, more than this task's outputs could "
                                   "take")
    return sorted(names)


def read_outputs(directory: Path, trials: int, max_bytes: int | None = None,
                 max_total: int | None = None) -> dict[tuple[int, int], np.ndarray[Any, Any]]:
    """Every well-named output file in `directory` (trial < `trials`), checked and loaded.

    The directory as a whole is checked first (`listing`: entries and bytes in all). A
    name given twice (two dtypes for one output) or a file that is not what its name
    says raises BadArrayFile: the verdict is then the parent's "unreadable output".
    """
    found: dict[tuple[int, int], np.ndarray[Any, Any]] = {}
    for entry in listing(directory, max_total):
        match = _OUTPUT.fullmatch(entry)
        if match is None:
            continue
        trial, output, dtype = int(match[1]), int(match[2]), match[3]
        if trial >= trials:
            continue
        if (trial, output) in found:
            raise BadArrayFile(f"trial {trial} output {output} was written twice")
        found[(trial, output)] = read_plain(directory / entry, dtype, max_bytes=max_bytes)
    return found


def read_plain(path: Path, dtype: str, shape: list[int] | None = None, *,
               max_bytes: int | None = None) -> np.ndarray[Any, Any]:
    """Load a `.npy` a child wrote: a regular file (no links), no pickles, exact dtype,
    and no larger than `max_bytes` (a child cannot make the parent read gigabytes).

    The header is read and checked first (`_check_header`): its dtype, its shape, and
    that the data it declares is exactly what the file holds, so a 100-byte file that
    declares a 4 TiB array is refused instead of allocated."""
    if dtype not in NUMPY_DTYPES:
        raise BadArrayFile(f"{path.name}: unknown dtype {dtype!r}")
    storage = np.dtype(_BITS[dtype]) if dtype in _BITS else NUMPY_DTYPES[dtype]
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BadArrayFile(f"{path.name} is not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise BadArrayFile(f"{path.name} is {info.st_size} bytes, more than any output "
                               f"of this task could be ({max_bytes})")
        _check_header(path.name, handle, info.st_size, dtype, storage, shape)
        try:
            data = np.load(handle, allow_pickle=False)
        except (ValueError, OSError, EOFError, MemoryError) as exc:
            raise BadArrayFile(f"{path.name} is not a .npy array: {exc}") from exc
    if type(data) is not np.ndarray or data.dtype != storage:
        raise BadArrayFile(f"{path.name} holds {data.dtype}, not {dtype}")
    if shape is not None and list(data.shape) != list(shape):
        raise BadArrayFile(f"{path.name} has shape {list(data.shape)}, not {shape}")
    result = data.view(NUMPY_DTYPES[dtype]) if dtype in _BITS else data
    return np.asarray(result, order="C")  # keeps a 0-d array 0-d


def _check_header(name: str, handle: Any, size: int, dtype: str, storage: np.dtype[Any],
                  shape: list[int] | None) -> None:
    """The `.npy` header of an open file, checked before any data is read (see
    `read_plain`); the file is left at its start for `np.load`."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            declared, _, descr = fmt.read_array_header_1_0(handle)
        elif version == (2, 0):
            declared, _, descr = fmt.read_array_header_2_0(handle)
        else:
            raise ValueError(f"format version {version} (nkibot writes 1.0)")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise BadArrayFile(f"{name} is not a .npy array: {exc}") from exc
    if descr != storage:
        raise BadArrayFile(f"{name} holds {descr}, not {dtype}")
    if shape is not None and list(declared) != list(shape):
        raise BadArrayFile(f"{name} has shape {list(declared)}, not {shape}")
    count = 1
    for n in declared:
        count *= int(n)
    data = size - handle.tell()
    if count * storage.itemsize != data:
        raise BadArrayFile(f"{name} declares shape {list(declared)} ({count * storage.itemsize} "
                           f"bytes of {dtype}) but holds {data} bytes of data")
    handle.seek(0)
