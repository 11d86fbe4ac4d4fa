"""The sandboxed harness child and reference sets (nkibot.verify.harness, .reference)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from nkibot.config.targets import parse_shape
from nkibot.task import InputSpec, Task
from nkibot.verify.harness import run_harness
from nkibot.verify.protocol import load_array
from nkibot.verify.reference import ReferenceRunError, ReferenceSet, compute_reference

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


def _task(name: str, entry: str, **fields: object) -> Task:
    path = KERNELS / name
    return Task.model_validate({"reference_source": path.read_text(), "entry_point": entry,
                                "source_path": name, "reference_file": str(path), **fields})


@pytest.fixture(scope="module")
def scale_ref() -> Iterator[ReferenceSet]:
    task = _task("scale_ref.py", "ScaleShift", seeds=[0, 1, 2],
                 inputs=[InputSpec(name="x", shape=(128, 64)),
                         InputSpec(name="y", shape=(128, 64), dtype="bfloat16")])
    with compute_reference(task, timeout_s=120) as ref:
        yield ref


class TestReference:
    def test_trials_and_large_magnitude(self, scale_ref: ReferenceSet) -> None:
        """One trial per seed plus a large-magnitude trial with both signs."""
        assert [(t.seed, t.label) for t in scale_ref.trials] == [
            (0, "normal"), (1, "normal"), (2, "normal"), (1002, "large magnitude")]
        big = scale_ref.inputs(3)[0]
        assert np.abs(big).max() > 10 and (big < 0).any() and (big > 0).any()
        assert not np.array_equal(scale_ref.inputs(0)[0], scale_ref.inputs(1)[0])

    def test_state_is_the_modules_state_dict(self, scale_ref: ReferenceSet) -> None:
        """State tensors are the module's parameters and buffers, built under seed 0."""
        torch.manual_seed(0)
        weight = torch.randn(64).numpy()
        state = [load_array(d) for d in scale_ref.state]
        np.testing.assert_array_equal(state[0], weight)
        np.testing.assert_allclose(state[1], np.linspace(-1, 1, 64), atol=1e-6)

    def test_expected_is_fp32_forward(self, scale_ref: ReferenceSet) -> None:
        """Expected outputs are the forward in fp32 on the saved inputs."""
        x, y = scale_ref.inputs(1)
        assert y.dtype.name == "bfloat16"
        w, shift = (load_array(d) for d in scale_ref.state)
        want = x * w + shift + y.astype(np.float32)
        got = scale_ref.expected(1, 0)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert scale_ref.low_precision and scale_ref.trials[1].native_dtypes == ["float32"]

    def test_native_dtype_for_low_precision(self) -> None:
        """A bf16 forward records PyTorch's native output dtype; expected stays fp32."""
        task = _task("relu_ref.py", "Model", seeds=[7], has_get_inputs=True,
                     inputs=[InputSpec(name="x", shape=(16, 8), dtype="bfloat16")])
        with compute_reference(task) as ref:
            trial = ref.trials[0]
            assert trial.native_dtypes == ["bfloat16"] and trial.native_error is None
            x = ref.inputs(0)[0]
            assert x.dtype.name == "bfloat16" and x.shape == (16, 8)
            np.testing.assert_array_equal(ref.expected(0, 0),
                                          np.maximum(x.astype(np.float32), 0))
            root = ref.root
        assert not root.exists()

    def test_get_inputs_drives_trials(self) -> None:
        """With get_inputs(), trial inputs are what it returns under manual_seed(seed)."""
        task = _task("relu_ref.py", "Model", seeds=[3], has_get_inputs=True,
                     inputs=[InputSpec(name="x", shape=(256, 64))])
        ref = compute_reference(task)
        torch.manual_seed(3)
        np.testing.assert_array_equal(ref.inputs(0)[0], torch.randn(256, 64).numpy())
        ref.close()
        assert not ref.root.exists() and not ref.expected_root.exists()

    def test_crashing_reference(self) -> None:
        """A forward that raises becomes ReferenceRunError naming the error."""
        task = _task("crash_ref.py", "Model", has_get_inputs=True,
                     inputs=[InputSpec(name="x", shape=(8, 8))])
        with pytest.raises(ReferenceRunError, match="the reference is broken"):
            compute_reference(task)


class TestKernelChild:
    def _request(self, kernel: str, out: Path) -> dict[str, object]:
        return {"op": "run_kernel", "kernel_path": str(KERNELS / kernel),
                "function": "relu_kernel", "out_dir": str(out), "arg_names": ["x"],
                "random": {"seed": 0, "specs": [{"shape": [128, 64], "dtype": "float32"}]}}

    def test_torch_free_and_prints_do_not_corrupt(self, tmp_path: Path) -> None:
        """The kernel child never imports torch, and kernel prints go to stderr."""
        reply = run_harness(self._request("prints.py", tmp_path), timeout_s=60)
        assert reply.response is not None, reply.outcome.reason()
        assert reply.response["ok"] and reply.response["torch_loaded"] is False
        assert b"{not json" in reply.outcome.stderr
        out = load_array(reply.response["trials"][0]["outputs"][0])
        assert out.shape == (128, 64) and (out >= 0).all()
        assert reply.response["stats"]["dma_bytes"] > 0

    def test_missing_function(self, tmp_path: Path) -> None:
        """Asking for a function the file lacks is a structured error, not a crash."""
        request = {**self._request("relu_ok.py", tmp_path), "function": "nope"}
        reply = run_harness(request, timeout_s=60)
        assert reply.response is not None and not reply.response["ok"]
        assert "nope" in reply.response["error"]["message"]

    def test_unknown_op(self) -> None:
        """An unknown op gets an error reply."""
        reply = run_harness({"op": "frobnicate"}, timeout_s=30)
        assert reply.response is not None and not reply.response["ok"]
        assert "frobnicate" in reply.failure()


class TestShapeSyntax:
    def test_shape_override_feeds_reference(self) -> None:
        """Specs from --shape reach the child unchanged."""
        spec = parse_shape("x=8x4xfloat16")
        task = _task("relu_ref.py", "Model", seeds=[0], has_get_inputs=True,
                     inputs=[InputSpec(name=spec.name, shape=spec.shape, dtype="float16")])
        with compute_reference(task) as ref:
            assert ref.inputs(0)[0].dtype == np.float16
            assert ref.trials[0].native_dtypes == ["float16"]
