"""The determinism pair side by side: with two cores both sandboxed children run at once,
each a fresh process with its own secret order; the parent judges only after both ended,
and decides exactly as when they run one after the other."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nkibot.task import InputSpec, Task
from nkibot.verify.client import HarnessReply, run_harness
from nkibot.verify.reference import ReferenceSet, compute_reference
from nkibot.verify.sandbox import Confinement
from nkibot.verify.trials import observe, parallel_runs

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


@pytest.fixture(scope="module")
def relu() -> Iterator[tuple[Task, ReferenceSet]]:
    ref = KERNELS / "relu_ref.py"
    task = Task.model_validate({
        "reference_source": ref.read_text(), "entry_point": "Model", "source_path": ref.name,
        "reference_file": str(ref), "has_get_inputs": True,
        "inputs": [InputSpec(name="x", shape=(256, 64), dtype="float32")]})  # type: ignore[arg-type]
    with compute_reference(task) as reference:
        yield task, reference


class Children:
    """Runs the kernel child as SimBackend does, recording each run's span and order."""

    def __init__(self, src: str, reference: ReferenceSet) -> None:
        self.src, self.reference = src, reference
        self.spans: list[tuple[float, float]] = []
        self.orders: list[list[int]] = []

    def __call__(self, fields: dict[str, Any], out_dir: Path) -> HarnessReply:
        request = {"op": "run_kernel", "source": self.src, "filename": "kernel.py",
                   "function": "relu_kernel", "out_dir": str(out_dir), "device": None,
                   "target": "trn1", **fields}
        readable = (self.reference.root / "inputs", self.reference.root / "state")
        began = time.monotonic()
        reply = run_harness(request, timeout_s=120, memory_mb=4096, confinement=Confinement(
            readable=readable, writable=(out_dir,), torch=False))
        self.spans.append((began, time.monotonic()))
        self.orders.append(json.loads(json.dumps(fields["order"])))
        return reply


def test_one_core_runs_one_child_at_a_time() -> None:
    assert not parallel_runs(1) and parallel_runs(2) and parallel_runs(16)


@pytest.mark.parametrize("parallel", [True, False])
def test_the_pair_decides_the_same_side_by_side_or_in_turn(
        relu: tuple[Task, ReferenceSet], tmp_path: Path, parallel: bool) -> None:
    _, reference = relu
    children = Children((KERNELS / "relu_ok.py").read_text(), reference)
    seen = observe(reference, ["x"], children, tmp_path, parallel=parallel)
    assert seen.run.deterministic is True and seen.run.inputs_modified == []
    assert len(seen.run.outputs) == len(reference.trials)
    (_, a_end), (b_start, _) = sorted(children.spans)
    assert (b_start < a_end) == parallel  # overlapping only side by side
    assert all(sorted(o) == list(range(len(reference.trials))) for o in children.orders)


def test_a_failed_first_run_is_judged_without_the_second(
        relu: tuple[Task, ReferenceSet], tmp_path: Path) -> None:
    """Side by side the second run has happened, but a first run that failed is judged as
    one that ran alone: no determinism claim either way."""
    _, reference = relu
    crash = (KERNELS / "relu_ok.py").read_text().replace(
        "def relu_kernel(x):", "def relu_kernel(x):\n    raise RuntimeError('boom')")
    together = Children(crash, reference)
    alone = Children(crash, reference)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    both = observe(reference, ["x"], together, tmp_path / "a", parallel=True)
    first = observe(reference, ["x"], alone, tmp_path / "b", parallel=False)
    assert len(together.spans) == 2 and len(alone.spans) == 1
    assert both.run.deterministic is None and first.run.deterministic is None
    assert both.run.outputs == [] and first.run.outputs == []


def test_same_bytes_is_bit_for_bit_across_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The determinism comparison sees one flipped bit anywhere, a NaN payload, -0.0
    against 0.0 and a size change, whether the arrays span one piece or many."""
    import numpy as np

    from nkibot.verify import trials

    monkeypatch.setattr(trials, "_PIECE", 64)  # 1000 floats, 500 words: 8 pieces
    x = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    assert trials.same_bytes(x, x.copy())
    for at in (0, 17, 999):
        y = x.copy()
        y.view(np.uint32)[at] ^= 1
        assert not trials.same_bytes(x, y)
    nan = np.array([np.nan], np.float32)
    payload = nan.copy()
    payload.view(np.uint32)[0] |= 1
    assert not trials.same_bytes(nan, payload)
    assert not trials.same_bytes(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert not trials.same_bytes(x, x[:-1])
    turned = x.reshape(10, 100).T
    assert trials.same_bytes(turned.copy(), np.ascontiguousarray(turned))


def test_a_passing_pair_writes_what_its_exchange_bytes_say(
        relu: tuple[Task, ReferenceSet], tmp_path: Path) -> None:
    """`exchange_bytes` sizes where a verification's directory goes (`scratch`): a passing
    pair leaves that much, headers aside, and no more; the sandbox's cap is well above."""
    from nkibot.verify.trials import exchange_bytes, write_limit

    _, reference = relu
    seen = observe(reference, ["x"], Children((KERNELS / "relu_ok.py").read_text(), reference),
                   tmp_path, parallel=False)
    assert seen.run.deterministic is True
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    written = sum(f.stat().st_size for f in files)
    bound = 2 * exchange_bytes(reference)
    assert bound - 2 * 4096 * len(reference.trials) * 2 <= written <= bound
    assert 2 * exchange_bytes(reference) <= write_limit(reference)  # fp32: 4 of its 8 bytes
