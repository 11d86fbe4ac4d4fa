"""The sandboxed harness child and reference sets (nkibot.verify.harness, .reference)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from nkibot.config.targets import parse_shape
from nkibot.task import InputSpec, Task
from nkibot.verify.client import run_harness
from nkibot.verify.protocol import load_array, read_outputs
from nkibot.verify.reference import (
    ReferenceRunError,
    ReferenceSet,
    compute_reference,
    overflow_x,
)
from nkibot.verify.sandbox import Confinement

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
    def test_trials_and_stress_trials(self, scale_ref: ReferenceSet) -> None:
        """One trial per seed, then large-magnitude, offset, overflow-scale and
        special-values trials."""
        assert [t.label for t in scale_ref.trials] == [
            "normal", "normal", "normal", "large magnitude", "offset +100", "offset -100",
            "overflow scale x44.4", "special values"]
        big = scale_ref.inputs(3)[0]
        assert np.abs(big).max() > 10 and (big < 0).any() and (big > 0).any()
        assert not np.array_equal(scale_ref.inputs(0)[0], scale_ref.inputs(1)[0])
        assert abs(float(scale_ref.inputs(4)[0].mean()) - 100) < 1
        assert abs(float(scale_ref.inputs(5)[0].mean()) + 100) < 1
        # Beyond where exp overflows in fp32 (88.7), with both signs.
        huge = scale_ref.inputs(6)[0]
        assert huge.max() > 88.8 and huge.min() < -88.8

    def test_seeds_are_secret_and_fresh(self, scale_ref: ReferenceSet) -> None:
        """Seeds are drawn per reference set, not the task's 0, 1, 2: no kernel can know them."""
        seeds = [t.seed for t in scale_ref.trials]
        assert len(set(seeds)) == len(seeds) and not set(seeds) & {0, 1, 2, 1002}

    def test_overflow_point_per_dtype(self) -> None:
        """exp overflows near 88.7 in fp32 and bf16, near 11.1 in fp16."""
        assert overflow_x(["float32"]) == pytest.approx(88.72, abs=0.01)
        assert overflow_x(["bfloat16"]) == pytest.approx(88.7, abs=0.1)
        assert overflow_x(["float32", "float16"]) == pytest.approx(11.09, abs=0.01)

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
        torch.manual_seed(ref.trials[0].seed)
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
        return {"op": "run_kernel", "source": (KERNELS / kernel).read_text(),
                "function": "relu_kernel", "out_dir": str(out),
                "random": {"seed": 0, "specs": [{"shape": [128, 64], "dtype": "float32"}]}}

    def _run(self, request: dict[str, object], out: Path, timeout_s: float = 60
             ) -> object:
        return run_harness(request, timeout_s=timeout_s,
                           confinement=Confinement(writable=(out,), torch=False))

    def test_prints_do_not_corrupt_and_outputs_are_files(self, tmp_path: Path) -> None:
        """Kernel prints go to stderr; outputs are raw files at fixed names."""
        reply = run_harness(self._request("prints.py", tmp_path), timeout_s=60,
                            confinement=Confinement(writable=(tmp_path,), torch=False))
        assert reply.response is not None, reply.outcome.reason()
        assert reply.response["ok"]
        assert b"{not json" in reply.outcome.stderr
        out = read_outputs(tmp_path, 1)[(0, 0)]
        assert out.shape == (128, 64) and (out >= 0).all()
        assert reply.response["stats"]["dma_bytes"] > 0

    def test_missing_function(self, tmp_path: Path) -> None:
        """Asking for a function the file lacks is a structured error, not a crash."""
        request = {**self._request("relu_ok.py", tmp_path), "function": "nope"}
        reply = run_harness(request, timeout_s=60,
                            confinement=Confinement(writable=(tmp_path,), torch=False))
        assert reply.response is not None and not reply.response["ok"]
        assert "nope" in reply.response["error"]["message"]

    def test_unknown_op(self) -> None:
        """An unknown op gets an error reply."""
        reply = run_harness({"op": "frobnicate"}, timeout_s=30)
        assert reply.response is not None and not reply.response["ok"]
        assert "frobnicate" in reply.failure()


    def test_the_kernel_is_compiled_once_for_all_its_trials(self, tmp_path: Path) -> None:
        """One child compiles the kernel's source once and runs that one function on every
        trial, in the order asked (issue 28, item 5): nothing is re-imported per trial."""
        from nkibot.verify.children.kernel_side import load_and_run
        from nkibot.verify.protocol import KernelReply, save_array

        source = ("RUNS = []\n\n\ndef double(a):\n    RUNS.append(a.shape)\n"
                  "    return a * 2\n")
        trials = []
        for t in range(4):
            saved = save_array(tmp_path / f"in{t}.npy", np.full((2, 3), t, np.float32))
            trials.append({"index": t, "inputs": [saved]})
        out = tmp_path / "out"
        out.mkdir()
        wrapped: list[object] = []

        def wrap(kernel: object) -> object:
            wrapped.append(kernel)
            return kernel

        reply: KernelReply = {"ok": False, "simulator": None, "device": None, "error": None,
                              "stats": {}}
        load_and_run({"source": source, "function": "double", "trials": trials,
                      "order": [2, 0, 3, 1], "out_dir": str(out)}, reply, wrap)
        assert reply["error"] is None
        (kernel,) = wrapped  # compiled and wrapped once
        assert len(kernel.__globals__["RUNS"]) == 4  # type: ignore[attr-defined]
        got = read_outputs(out, 4)
        assert [float(got[(t, 0)][0, 0]) for t in range(4)] == [0.0, 2.0, 4.0, 6.0]


class TestShapeSyntax:
    def test_shape_override_feeds_reference(self) -> None:
        """Specs from --shape reach the child unchanged."""
        spec = parse_shape("x=8x4xfloat16")
        task = _task("relu_ref.py", "Model", seeds=[0], has_get_inputs=True,
                     inputs=[InputSpec(name=spec.name, shape=spec.shape, dtype="float16")])
        with compute_reference(task) as ref:
            assert ref.inputs(0)[0].dtype == np.float16
            assert ref.trials[0].native_dtypes == ["float16"]
