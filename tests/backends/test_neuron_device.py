"""Device-side helpers that run without a device: kernel discovery, inputs, timing, baselines."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nkibot.backends.neuron import device as nd
from nkibot.task import InputSpec, Task

KERNEL = """
import nki
import nki.language as nl

def helper(x):
    return x

@nki.jit
def add_kernel(a_input, b_input):
    return a_input

def after():
    pass
"""


class TestKernelDiscovery:
    def test_finds_the_jit_function(self) -> None:
        """The @nki.jit function is the kernel, wherever it sits in the file."""
        assert nd.find_kernel_name(KERNEL) == "add_kernel"

    def test_falls_back_to_last_function(self) -> None:
        """Without a decorator the last top-level function is the kernel."""
        assert nd.find_kernel_name("def a():\n    pass\ndef b():\n    pass\n") == "b"

    def test_no_function_is_an_error(self) -> None:
        """Source without a function has no kernel."""
        with pytest.raises(ValueError):
            nd.find_kernel_name("x = 1\n")

    def test_argument_names_are_the_neff_inputs(self) -> None:
        """The kernel's parameter names name the NEFF's input tensors."""
        assert nd.kernel_arg_names(KERNEL, "add_kernel") == ["a_input", "b_input"]


class TestRunOnDevice:
    def test_single_output_becomes_a_list(self) -> None:
        """A kernel returning one array yields a one-element list of arrays."""
        out = nd.run_on_device(lambda a, b: a + b, [np.ones(3), np.ones(3)])
        assert len(out) == 1 and out[0].tolist() == [2.0, 2.0, 2.0]

    def test_tuple_outputs_are_kept_in_order(self) -> None:
        """A kernel returning a tuple yields its arrays in order."""
        out = nd.run_on_device(lambda a: (a, a * 3), [np.ones(2)])
        assert [o.tolist() for o in out] == [[1.0, 1.0], [3.0, 3.0]]


class TestTiming:
    def test_warmup_is_not_timed(self) -> None:
        """Warm-up calls run but only the timed calls produce samples, in µs."""
        ticks = iter(range(0, 10_000_000, 1500))
        calls: list[int] = []
        samples = nd.time_calls(lambda: calls.append(1), 2, 3, clock=lambda: next(ticks))
        assert len(calls) == 5
        assert samples == [1.5, 1.5, 1.5]


class TestInputsAndReference:
    def test_inputs_are_seeded_and_typed(self) -> None:
        """Same seed, same inputs; bf16 arrays use ml_dtypes for the kernel."""
        specs = [InputSpec(name="x", shape=(2, 3), dtype="bfloat16"),
                 InputSpec(name="i", shape=(4,), dtype="int32")]
        first, second = nd.make_inputs(specs, 7), nd.make_inputs(specs, 7)
        assert all(bool((a == b).all()) for a, b in zip(first, second, strict=True))
        arr = nd.to_numpy(first[0])
        assert arr.dtype == ml_dtypes.bfloat16 and arr.shape == (2, 3)
        assert nd.to_numpy(first[1]).dtype == np.int32

    def test_kernel_arrays_follow_the_calling_convention(self, tmp_path: Path) -> None:
        """Kernel arrays are the forward inputs, then the state_dict tensors in order."""
        src = ("import torch\nclass Lin(torch.nn.Module):\n"
               "    def __init__(self, n):\n        super().__init__()\n"
               "        self.fc = torch.nn.Linear(n, n)\n"
               "    def forward(self, x):\n        return self.fc(x)\n")
        task = Task(reference_source=src, entry_point="Lin", init_args=[8],
                    inputs=[InputSpec(name="x", shape=(2, 8))])
        ref = nd.build_reference(task, tmp_path)
        forward, arrays = nd.kernel_arrays(task, ref, seed=0)
        assert [a.shape for a in arrays] == [(2, 8), (8, 8), (8,)]
        np.testing.assert_array_equal(arrays[1], ref.fc.weight.detach().numpy())
        samples = nd.cpu_baseline(ref, forward, warmup=1, iters=4)
        assert len(samples) == 4 and all(s > 0 for s in samples)

    def test_function_reference_is_wrapped(self, tmp_path: Path) -> None:
        """A plain function reference becomes a module with an empty state_dict."""
        task = Task(reference_source="def f(a):\n    return a * 2\n", entry_point="f",
                    kind="function", inputs=[InputSpec(name="a", shape=(3,))])
        ref = nd.build_reference(task, tmp_path)
        forward, arrays = nd.kernel_arrays(task, ref, seed=1)
        assert len(arrays) == 1
        assert (ref(*forward) == forward[0] * 2).all()


class TestFindNeff:
    def test_prefers_kernel_neff(self, tmp_path: Path) -> None:
        """`kernel.neff` in the artifacts directory is the NEFF; else the newest *.neff."""
        assert nd.find_neff(tmp_path) is None
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "x.neff").write_bytes(b"1")
        assert nd.find_neff(tmp_path) == tmp_path / "sub" / "x.neff"
        (tmp_path / "kernel.neff").write_bytes(b"2")
        assert nd.find_neff(tmp_path) == tmp_path / "kernel.neff"
