"""Judging a kernel run over all trials, with the dynamic guards (nkibot.verify.judge)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from nkibot.task import InputSpec, Task
from nkibot.verify.judge import KernelRun, judge
from nkibot.verify.protocol import save_array
from nkibot.verify.reference import ReferenceSet, ReferenceTrial

Fn = Callable[[np.ndarray], np.ndarray]
TASK = Task(reference_source="", entry_point="M", inputs=[InputSpec(name="x", shape=(8, 4))])


def _reference(tmp: Path, fn: Fn, trials: int = 3) -> ReferenceSet:
    root, exp_root = tmp / "in", tmp / "exp"
    root.mkdir()
    exp_root.mkdir()
    made = []
    for t in range(trials):
        x = np.random.default_rng(t).standard_normal((8, 4)).astype(np.float32)
        made.append(ReferenceTrial(
            index=t, seed=t, label="normal", native_dtypes=["float32"],
            inputs=[save_array(root / f"x{t}.npy", x)],
            expected=[save_array(exp_root / f"e{t}.npy", fn(x))]))
    return ReferenceSet(root=root, expected_root=exp_root, trials=made, state=[],
                        low_precision=False)


@pytest.fixture
def relu_ref(tmp_path: Path) -> Iterator[ReferenceSet]:
    with _reference(tmp_path, lambda x: np.maximum(x, 0)) as ref:
        yield ref


def _outputs(ref: ReferenceSet, fn: Fn) -> list[list[np.ndarray]]:
    return [[fn(ref.inputs(t)[0])] for t in range(len(ref.trials))]


class TestJudge:
    def test_correct_run_passes(self, relu_ref: ReferenceSet) -> None:
        """Correct outputs on every trial pass with no reasons."""
        verdict = judge(TASK, relu_ref, KernelRun(_outputs(relu_ref, lambda x: np.maximum(x, 0)),
                                                  deterministic=True, arg_names=["x"]))
        assert verdict.passed and verdict.reasons == [] and len(verdict.trials) == 3

    def test_constant_outputs(self, relu_ref: ReferenceSet) -> None:
        """The same output for every trial, while the reference changes, is named."""
        verdict = judge(TASK, relu_ref, KernelRun(_outputs(relu_ref, np.zeros_like)))
        assert verdict.reasons[0].startswith("guard:outputs-constant output 0")
        assert not verdict.passed

    def test_copied_input(self, relu_ref: ReferenceSet) -> None:
        """An output that is an input, unchanged, is named with the argument's name."""
        verdict = judge(TASK, relu_ref, KernelRun(_outputs(relu_ref, np.copy), arg_names=["x"]))
        assert "guard:output-copies-input output 0 is input x unchanged" in verdict.reasons

    def test_identity_reference_is_not_copying(self, tmp_path: Path) -> None:
        """When the reference is the identity, returning the input is correct."""
        with _reference(tmp_path, np.copy) as ref:
            verdict = judge(TASK, ref, KernelRun(_outputs(ref, np.copy)))
        assert verdict.passed, verdict.reasons

    def test_constant_reference_is_not_constant_output(self, tmp_path: Path) -> None:
        """A reference that ignores its inputs allows an output that does too."""
        with _reference(tmp_path, lambda x: np.ones_like(x)) as ref:
            verdict = judge(TASK, ref, KernelRun(_outputs(ref, np.ones_like)))
        assert verdict.passed, verdict.reasons

    def test_seed_specific(self, relu_ref: ReferenceSet) -> None:
        """Right on the first trial only is named seed-specific."""
        first = np.maximum(relu_ref.inputs(0)[0], 0)
        outputs = [[first], [first * 2], [first * 3]]
        verdict = judge(TASK, relu_ref, KernelRun(outputs))
        assert any(r.startswith("guard:seed-specific") for r in verdict.reasons)

    def test_bug_on_one_trial_is_not_seed_specific(self, relu_ref: ReferenceSet) -> None:
        """Failing one later trial is a numeric failure, not a replayed output."""
        outputs = _outputs(relu_ref, lambda x: np.maximum(x, 0))
        outputs[2] = [outputs[2][0] + 1]
        verdict = judge(TASK, relu_ref, KernelRun(outputs))
        assert [r.split()[0] for r in verdict.reasons] == ["numeric:mismatch"]
        assert "trial 2" in verdict.reasons[0]

    def test_dynamic_facts(self, relu_ref: ReferenceSet) -> None:
        """Modified inputs and nondeterminism reported by the backend become reasons."""
        run = KernelRun(_outputs(relu_ref, lambda x: np.maximum(x, 0)),
                        inputs_modified=["x", "x"], deterministic=False)
        verdict = judge(TASK, relu_ref, run)
        assert verdict.reasons[:2] == [
            "guard:inputs-modified x",
            "guard:nondeterministic two runs on identical inputs disagreed"]

    def test_output_count(self, relu_ref: ReferenceSet) -> None:
        """Returning the wrong number of outputs is named per trial."""
        relu = np.maximum(relu_ref.inputs(0)[0], 0)
        verdict = judge(TASK, relu_ref, KernelRun([[relu, relu]]))
        assert verdict.reasons == [
            "numeric:output-count trial 0: expected 1 output(s), got 2",
            "numeric:trials-missing only 1 of 3 trials ran"]


class TestIllConditioned:
    """Stress trials whose fp32 reference cannot meet the tolerance (verify.stats._slack)."""

    @staticmethod
    def _set(tmp: Path, labels: list[str], error: float) -> ReferenceSet:
        root, exp_root = tmp / "in", tmp / "exp"
        root.mkdir()
        exp_root.mkdir()
        made = []
        for t, label in enumerate(labels):
            x = np.random.default_rng(t).standard_normal((8, 4)).astype(np.float32)
            made.append(ReferenceTrial(
                index=t, seed=t, label=label, native_dtypes=["float32"],
                inputs=[save_array(root / f"x{t}.npy", x)],
                expected=[save_array(exp_root / f"e{t}.npy", np.maximum(x, 0))],
                ref_errors=[0.0 if label == "normal" else error]))
        return ReferenceSet(root=root, expected_root=exp_root, trials=made, state=[],
                            low_precision=False)

    def test_noted_and_passed_when_normal_trials_test_the_values(self, tmp_path: Path) -> None:
        with self._set(tmp_path, ["normal", "offset +100"], error=0.5) as ref:
            outs = _outputs(ref, lambda x: np.maximum(x, 0))
            outs[1] = [outs[1][0] + 0.6]  # off by more than the tolerance, within 2 x 0.5
            verdict = judge(TASK, ref, KernelRun(outs, deterministic=True, arg_names=["x"]))
        assert verdict.passed, verdict.reasons
        assert [d.rule for d in verdict.diagnostics] == ["reference:ill-conditioned"]
        assert verdict.trials[1].ill_conditioned and not verdict.trials[0].ill_conditioned

    def test_an_output_no_trial_tests_fails(self, tmp_path: Path) -> None:
        with self._set(tmp_path, ["offset +100", "offset -100"], error=0.5) as ref:
            outs = _outputs(ref, lambda x: np.maximum(x, 0) + 0.6)
            verdict = judge(TASK, ref, KernelRun(outs, deterministic=True, arg_names=["x"]))
        assert not verdict.passed
        assert verdict.reasons[0].startswith("guard:ill-conditioned output 0")
