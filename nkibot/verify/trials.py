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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nkibot.verify.client import HarnessReply
from nkibot.verify.judge import Arrays, KernelRun
from nkibot.verify.protocol import (
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


def observe(reference: ReferenceSet, names: list[str], run_child: RunChild,
            workdir: Path) -> Observed:
    """Both runs of the kernel and the parent's reading of them."""
    count = len(reference.trials)
    base = {"trials": [{"index": t.index, "inputs": t.inputs} for t in reference.trials],
            "state": reference.state}
    first_dir, second_dir = workdir / "first", workdir / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first = run_child({**base, "order": shuffled(count)}, first_dir)
    unreadable: list[str] = []
    limit = _max_bytes(reference)
    outputs = _outputs(first_dir, count, unreadable, limit)
    run = KernelRun(outputs=outputs, arg_names=names,
                    inputs_modified=_modified(reference, first_dir, len(outputs), names))
    if len(outputs) < count or first.response is None or first.response.get("error"):
        # Already a failure: a second run would only cost time (and for a kernel that
        # times out, a second time-out).
        return Observed(first, run, unreadable)
    run_child({**base, "order": shuffled(count)}, second_dir)  # judged by its files alone
    again = _outputs(second_dir, count, [], limit)
    run.deterministic = len(again) == len(outputs) and all(
        _same(a, b) for a, b in zip(outputs, again, strict=True))
    return Observed(first, run, unreadable)


def _max_bytes(reference: ReferenceSet) -> int:
    """The most bytes an output file may have: the largest expected output at 8 bytes per
    element (a float64 answer), plus room for the header."""
    sizes = [math.prod(d["shape"]) for t in reference.trials for d in t.expected]
    return 8 * max(sizes, default=0) + 4096


def _outputs(directory: Path, count: int, unreadable: list[str], limit: int) -> list[Arrays]:
    """Outputs of trials 0.. up to the first trial without any (a prefix, as judge wants)."""
    try:
        found = read_outputs(directory, count, limit)
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
            if after.tobytes() != original.tobytes():
                modified.append(name)
    return list(dict.fromkeys(modified))


def _same(a: Arrays, b: Arrays) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True))
