"""Reference outputs (nkibot.verify.reference): a Triton kernel's launcher as the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkibot.convert.taskload import load_task
from nkibot.task import Task
from nkibot.verify.reference import ReferenceRunError, compute_reference, harness_env

TRITON_ADD = Path(__file__).resolve().parents[1] / "fixtures" / "triton" / "add.py"


def _triton_task() -> Task:
    pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")
    return load_task(TRITON_ADD, "add_kernel", display_path="add.py").model_copy(
        update={"seeds": [0, 1]})


class TestHarnessEnv:
    def test_only_triton_tasks_run_on_the_interpreter(self) -> None:
        """TRITON_INTERPRET=1 is set for a Triton task's child and for no other kind."""
        task = Task(reference_source="", entry_point="f")
        assert harness_env(task) is None
        assert harness_env(task.model_copy(update={"kind": "triton"})) == {
            "TRITON_INTERPRET": "1"}


class TestTritonReference:
    def test_launcher_outputs_equal_x_plus_y(self) -> None:
        """Each trial's expected output, from Triton's CPU interpreter, is x + y exactly."""
        task = _triton_task()
        with compute_reference(task, timeout_s=120.0) as ref:
            assert len(ref.trials) == 6  # two seeds, large magnitude, offsets, overflow
            for t in range(len(ref.trials)):
                x, y = ref.inputs(t)
                assert x.shape == (256, 64) and not np.array_equal(x, y)
                np.testing.assert_array_equal(ref.expected(t, 0), x + y)

    def test_without_the_interpreter_the_launcher_fails(self) -> None:
        """The interpreter is what makes CPU tensors work: as a plain function it fails."""
        task = _triton_task().model_copy(update={"kind": "function"})
        with pytest.raises(ReferenceRunError):
            compute_reference(task, timeout_s=120.0)
