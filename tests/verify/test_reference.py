"""Reference outputs (nkibot.verify.reference): a Triton kernel's launcher as the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkibot.convert.taskload import load_task
from nkibot.task import Task
from nkibot.verify.children.torch_side import TORCH_DTYPES
from nkibot.verify.reference import (
    ReferenceRunError,
    compute_reference,
    harness_env,
    trial_plan,
)

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


class TestSpecialValues:
    def test_plan_ends_with_the_special_values_trial(self) -> None:
        """Every plan ends with the special-values trial (last, so dropping it renumbers
        nothing)."""
        plan = trial_plan(Task(reference_source="", entry_point="f"))
        assert plan[-1]["kind"] == "special" and plan[-1]["label"] == "special values"
        assert sum(step["kind"] == "special" for step in plan) == 1

    @pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
    def test_inputs_hold_zeros_of_both_signs_ties_and_edges(self, dtype: str) -> None:
        """A special trial's float input holds +0.0 and -0.0, +-1, the dtype's smallest
        normal and ties; integers are left alone. Nothing larger than 1 is mixed in, so a
        contraction over it stays as well conditioned as a normal trial's."""
        import torch

        from nkibot.verify.children.stress import special_values, transform

        t = TORCH_DTYPES[dtype]
        x = torch.randn(64, 64).to(t)
        ints = torch.arange(16)
        got, same = transform([x, ints], 7, "special", 0.0)
        assert got.dtype == t and same is ints
        flat = got.float().flatten()
        zeros = flat[flat == 0]
        assert bool(torch.signbit(zeros).any()) and bool((~torch.signbit(zeros)).any())
        for v in special_values(t).tolist():
            assert bool((flat == v).any()), v
        assert int((flat[1:] == flat[:-1]).sum()) > 64 * 64 // 16  # ties with a neighbour
        assert float(special_values(t).abs().max()) == 1.0
        assert torch.equal(transform([x], 7, "special", 0.0)[0], got)  # seeded


class TestTritonReference:
    def test_launcher_outputs_equal_x_plus_y(self) -> None:
        """Each trial's expected output, from Triton's CPU interpreter, is x + y exactly."""
        task = _triton_task()
        with compute_reference(task, timeout_s=120.0) as ref:
            # two seeds, large magnitude, offsets, overflow, special values
            assert len(ref.trials) == 7 and ref.trials[-1].label == "special values"
            for t in range(len(ref.trials)):
                x, y = ref.inputs(t)
                assert x.shape == (256, 64) and not np.array_equal(x, y)
                np.testing.assert_array_equal(ref.expected(t, 0), x + y)

    def test_without_the_interpreter_the_launcher_fails(self) -> None:
        """The interpreter is what makes CPU tensors work: as a plain function it fails."""
        task = _triton_task().model_copy(update={"kind": "function"})
        with pytest.raises(ReferenceRunError):
            compute_reference(task, timeout_s=120.0)


class TestReferenceErrors:
    """The reference child reports each fp32 output's own error against a float64 run."""

    def test_offset_matmul_error_is_measured_and_integers_get_none(self) -> None:
        import torch

        from nkibot.verify.children.torch_side import _reference_errors

        class MatmulAndArgmax(torch.nn.Module):
            def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
                return a @ b, torch.argmax(a, dim=1)

        gen = torch.Generator().manual_seed(0)
        a = torch.rand((32, 2048), generator=gen) + 100
        b = torch.rand((2048, 16), generator=gen) + 100
        model = MatmulAndArgmax()
        with torch.no_grad():
            outputs = list(model(a, b))
        errors = _reference_errors(model, [a, b], outputs)
        exact = a.double() @ b.double()
        assert errors[0] == pytest.approx(float((outputs[0].double() - exact).abs().max()))
        assert errors[0] > 0.0  # sums near 2e7 in fp32 are off by whole units
        assert errors[1] == 0.0

    def test_a_model_without_float64_gets_no_slack(self) -> None:
        import torch

        from nkibot.verify.children.torch_side import _reference_errors

        def refuses(x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.float64:
                raise RuntimeError("no float64 kernel")
            return x * 2

        x = torch.ones(4)
        assert _reference_errors(refuses, [x], [x * 2]) == [0.0]

    def test_non_finite_elements_are_left_out_of_the_error(self) -> None:
        """inf and NaN in the fp32 output (an overflow the float64 run does not have) are
        not the reference's rounding error: the error is the largest finite difference."""
        import torch

        from nkibot.verify.children.torch_side import _max_finite_diff

        ref = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
        out = torch.tensor([1.5, float("inf"), float("nan"), 4.0, 4.75])
        assert _max_finite_diff(out, ref) == 0.5
        assert _max_finite_diff(torch.full((3,), float("nan")), ref[:3]) == 0.0
        assert _max_finite_diff(torch.empty(0), torch.empty(0, dtype=torch.float64)) == 0.0
        assert ref.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # the reference is not modified

    def test_the_difference_is_taken_in_chunks(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        from nkibot.verify.children import torch_side

        monkeypatch.setattr(torch_side, "DIFF_CHUNK", 2)
        ref = torch.arange(7, dtype=torch.float64).reshape(7, 1)
        out = ref.float().clone()
        out[0, 0], out[3, 0], out[6, 0] = float("nan"), 3.25, 5.0
        assert torch_side._max_finite_diff(out, ref) == 1.0
        out[6, 0] = 6.0
        assert torch_side._max_finite_diff(out, ref) == 0.25

    def test_float64_budget_counts_cpu_time(self) -> None:
        """Sleeping (a busy host, waiting for a core) does not use the float64 budget."""
        import time

        import torch

        from nkibot.verify.children import torch_side

        def slow_but_idle(x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.3)
            return x * 2

        before = torch_side._fp64_spent[0]
        x = torch.ones(4)
        assert torch_side._timed_errors(slow_but_idle, [x], [x * 2]) == [0.0]
        assert torch_side._fp64_spent[0] - before < 0.2


class TestReferenceThreads:
    def test_the_reference_child_runs_torch_on_every_core(self, tmp_path: Path) -> None:
        """The reference runs alone, so its sandboxed child sets torch to the cores the
        parent may use (`launch.cores`); the child's env keeps one thread otherwise."""
        from nkibot.verify.launch import cores

        src = tmp_path / "threads.py"
        src.write_text(
            "import torch\n\n\n"
            "class Model(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * 0 + torch.get_num_threads()\n\n\n"
            "def get_inputs():\n"
            "    return [torch.randn(4, 8)]\n\n\n"
            "def get_init_inputs():\n"
            "    return []\n", encoding="utf-8")
        task = load_task(src, "Model")
        with compute_reference(task, timeout_s=120.0) as ref:
            assert np.all(ref.expected(0, 0) == cores())
