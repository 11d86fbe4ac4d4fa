"""Run a candidate kernel on a ReferenceSet's trials, and observe it from the parent.

The kernel runs twice, each time in a fresh sandboxed child that sees only the inputs
(read-only), its own output directory and its source (on stdin); torch and the expected
outputs are not in its view. Each run takes the trials in its own secret shuffled
order, so state kept across calls (a counter, a replayed first answer) shows as a
difference between the runs. The parent then decides every guard on its own data:
- outputs: fixed file names in the directory it made (`protocol.read_outputs`);
- inputs modified: the inputs as the kernel left them, against the parent's copies;
- determinism: the second run's outputs, bit for bit, against the first's.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.verify.client import HarnessReply
from nkibot.verify.judge import Arrays, KernelRun
from nkibot.verify.launch import cores
from nkibot.verify.protocol import (
    NUMPY_DTYPES,
    BadArrayFile,
    dtype_name,
    read_outputs,
    read_plain,
    to_kernel_dtype,
)
from nkibot.verify.reference import ReferenceSet

#: Runs the kernel child once: (request fields, output directory) -> its reply.
RunChild = Callable[[dict[str, Any], Path], HarnessReply]


@dataclass
class Observed:
    """The first run's reply and what the parent read from both runs."""

    reply: HarnessReply
    run: KernelRun
    unreadable: list[str] = field(default_factory=list)


def shuffled(count: int) -> list[int]:
    order = list(range(count))
    secrets.SystemRandom().shuffle(order)
    return order


def parallel_runs(available: int) -> bool:
    """Run the two children at once only with a core for each: on one core, one at a
    time keeps that core busy and stops after a first run that already failed."""
    return available >= 2


def observe(reference: ReferenceSet, names: list[str], run_child: RunChild,
            workdir: Path, parallel: bool | None = None) -> Observed:
    """Both runs of the kernel and the parent's reading of them.

    With two cores (`parallel`, default `parallel_runs(cores())`) the two children run at
    the same time: each is still a fresh sandboxed process with its own secret order and
    output directory, and the parent reads and judges both only after both ended.
    """
    count = len(reference.trials)
    base = {"trials": [{"index": t.index, "inputs": t.inputs} for t in reference.trials],
            "state": reference.state, "write_limit": write_limit(reference)}
    first_dir, second_dir = workdir / "first", workdir / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    if parallel_runs(cores()) if parallel is None else parallel:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="nkibot-run") as pool:
            runs = [pool.submit(run_child, {**base, "order": shuffled(count)}, d)
                    for d in (first_dir, second_dir)]
            first = runs[0].result()
            runs[1].result()
        seen = _read_first(reference, names, first, first_dir)
    else:
        seen = _read_first(reference, names, run_child(
            {**base, "order": shuffled(count)}, first_dir), first_dir)
        if not _complete(seen, count):
            # Already a failure: a second run would only cost time (and for a kernel that
            # times out, a second time-out).
            return seen
        run_child({**base, "order": shuffled(count)}, second_dir)  # judged by its files alone
    if _complete(seen, count):
        again = _outputs(second_dir, count, [], reference)
        seen.run.deterministic = len(again) == len(seen.run.outputs) and all(
            _same(a, b) for a, b in zip(seen.run.outputs, again, strict=True))
    return seen


def _read_first(reference: ReferenceSet, names: list[str], first: HarnessReply,
                first_dir: Path) -> Observed:
    """The first run's reply, outputs and modified inputs, as the parent reads them."""
    unreadable: list[str] = []
    outputs = _outputs(first_dir, len(reference.trials), unreadable, reference)
    run = KernelRun(outputs=outputs, arg_names=names,
                    inputs_modified=_modified(reference, first_dir, len(outputs), names))
    return Observed(first, run, unreadable)


def _complete(seen: Observed, count: int) -> bool:
    """Every trial's outputs read back and no error claimed: worth a determinism check."""
    response = seen.reply.response
    return len(seen.run.outputs) >= count and response is not None and not response.get(
        "error")


#: Room for one .npy file's header, in every size bound below.
_HEADER = 4096


def _max_bytes(reference: ReferenceSet) -> int:
    """The most bytes an output file may have: the largest expected output at 8 bytes per
    element (a float64 answer), plus room for the header."""
    sizes = [math.prod(d["shape"]) for t in reference.trials for d in t.expected]
    return 8 * max(sizes, default=0) + _HEADER


def write_limit(reference: ReferenceSet) -> int:
    """The most bytes a kernel child may leave in its output directory, in all: every
    trial's outputs and inputs as left (`t{t}_a{i}`), each at 8 bytes per element plus
    a header. The sandbox stops a child that writes more (`Confinement.write_limit`), and
    the parent refuses a directory holding more before reading any of it."""
    files = [d for t in reference.trials for d in [*t.expected, *t.inputs, *reference.state]]
    return sum(8 * math.prod(d["shape"]) + _HEADER for d in files) + 1024 * 1024


def exchange_bytes(reference: ReferenceSet) -> int:
    """What a kernel child that passes leaves in its output directory: every trial's outputs
    at the itemsize of the dtype each must have (`stats.dtype_ok`: the native one) and its
    inputs as left at their own, with headers. Where the directory goes (`scratch`) is
    sized by this; `write_limit`, twice as much or more, is the cap the sandbox enforces."""
    total = 0
    for t in reference.trials:
        outs = zip(t.expected, t.native_dtypes, strict=False)
        total += sum(math.prod(d["shape"]) * _itemsize(native) for d, native in outs)
        total += sum(math.prod(d["shape"]) * _itemsize(d["dtype"])
                     for d in [*t.inputs, *reference.state])
        total += _HEADER * (len(t.expected) + len(t.inputs) + len(reference.state))
    return total


def _itemsize(name: str) -> int:
    """Bytes per element of dtype `name` (8, the widest, for one we do not know)."""
    try:
        return int(NUMPY_DTYPES[name].itemsize)
    except (KeyError, TypeError, ValueError):
        return 8


def _outputs(directory: Path, count: int, unreadable: list[str],
             reference: ReferenceSet) -> list[Arrays]:
    """Outputs of trials 0.. up to the first trial without any (a prefix, as judge wants)."""
    try:
        found = read_outputs(directory, count, _max_bytes(reference), write_limit(reference))
    except (BadArrayFile, OSError) as exc:
        unreadable.append(str(exc))
        return []
    result: list[Arrays] = []
    for t in range(count):
        keys = sorted(k for (trial, k) in found if trial == t)
        if not keys or keys != list(range(len(keys))):
            break
        result.append([found[(t, k)] for k in keys])
    return result


def _modified(reference: ReferenceSet, directory: Path, trials: int,
              names: list[str]) -> list[str]:
    state = [read_plain(Path(d["file"]), d["dtype"], d["shape"]) for d in reference.state]
    modified: list[str] = []
    for t in range(trials):
        originals = [to_kernel_dtype(a) for a in reference.inputs(t) + state]
        for i, original in enumerate(originals):
            name = names[i] if i < len(names) else f"arg{i}"
            path = directory / f"t{t}_a{i}.{dtype_name(original.dtype)}.npy"
            try:
                after = read_plain(path, dtype_name(original.dtype), list(original.shape))
            except (BadArrayFile, OSError):
                modified.append(name)  # not reported as it was left: cannot be unchanged
                continue
            if not same_bytes(after, original):
                modified.append(name)
    return list(dict.fromkeys(modified))


def _same(a: Arrays, b: Arrays) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and same_bytes(x, y)
        for x, y in zip(a, b, strict=True))


#: Words compared at a time by `same_bytes`.
_PIECE = 1 << 19


def same_bytes(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> bool:
    """Bit for bit the same (NaN payloads and -0.0 included), a piece at a time: two
    `tobytes()` copies of a 264 MB output cost more than the comparison."""
    if x.nbytes != y.nbytes:
        return False
    word = np.uint64 if x.nbytes % 8 == 0 else np.uint8
    bx = np.ascontiguousarray(x).reshape(-1).view(np.uint8).view(word)
    by = np.ascontiguousarray(y).reshape(-1).view(np.uint8).view(word)
    return all(np.array_equal(bx[i:i + _PIECE], by[i:i + _PIECE])
               for i in range(0, bx.size, _PIECE))
