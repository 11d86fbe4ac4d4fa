"""On a Trn1 host: compile, run, verify numerically and profile a tiny add kernel.

Marked `neuron`: collected everywhere, skipped with the conftest's stated reason where
there is no NeuronCore and Neuron SDK. Run on a Trn1 host with
`python -m pytest tests/backends/test_neuron_hardware.py --backend=neuron -ra`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkibot.backends.neuron.backend import NeuronBackend
from nkibot.backends.neuron.neff_cache import NeffCache
from nkibot.backends.select import select_backend
from nkibot.task import InputSpec, Task

pytestmark = pytest.mark.neuron

ADD_KERNEL = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    a_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a)
    nisa.dma_copy(dst=b_tile, src=b)
    c_tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
    nisa.dma_copy(dst=out, src=c_tile)
    return out
"""
BAD_KERNEL = ADD_KERNEL.replace("a.shape, dtype=a.dtype, buffer=nl.sbuf)",
                                "(256, 512), dtype=a.dtype, buffer=nl.sbuf)", 1)
REFERENCE = (
    "import torch\n\nclass Add(torch.nn.Module):\n"
    "    def forward(self, a, b):\n        return a + b\n"
)


def _task() -> Task:
    specs = [InputSpec(name="a", shape=(128, 512)), InputSpec(name="b", shape=(128, 512))]
    return Task(reference_source=REFERENCE, entry_point="Add", inputs=specs)


@pytest.fixture
def backend(tmp_path: Path) -> NeuronBackend:
    chosen = select_backend("neuron", core_id=0, cache_dir=tmp_path)
    assert isinstance(chosen, NeuronBackend)
    return chosen


class TestTrn1Device:
    def test_compile_and_run_add(self, backend: NeuronBackend) -> None:
        """The add kernel compiles with neuronx-cc for trn1 and runs on NeuronCore 0."""
        result = backend.compile(ADD_KERNEL, _task())
        assert result.ok, result.log
        assert result.compiler.startswith("neuronx-cc")

    def test_outputs_match_numpy(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """run_on_device returns a + b computed on the NeuronCore."""
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
        monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0")
        from nkibot.backends.neuron import device as neuron_device

        kernel = neuron_device.load_source(ADD_KERNEL, tmp_path / "kernel.py", "add_kernel")
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((128, 512), dtype=np.float32) for _ in range(2))
        [out] = neuron_device.run_on_device(kernel, [a, b])
        np.testing.assert_allclose(out, a + b, rtol=1e-6, atol=1e-6)

    def test_compile_error_is_located(self, backend: NeuronBackend) -> None:
        """A partition dimension over 128 fails to compile, located in kernel.py."""
        result = backend.compile(BAD_KERNEL, _task())
        assert not result.ok
        assert any(d.file and d.line for d in result.diagnostics), result.log

    def test_profile_with_baselines(self, backend: NeuronBackend) -> None:
        """Profiling reports Trn1 latencies, both PyTorch baselines and both speedups."""
        prof = backend.profile(ADD_KERNEL, _task())
        assert prof.hardware and prof.measured_on == "Trn1 hardware"
        assert prof.kernel is not None and prof.kernel.iterations == 100
        assert prof.kernel.p50_us <= prof.kernel.p99_us
        assert prof.torch_cpu is not None and prof.torch_device is not None, prof.log
        assert prof.speedup_vs_cpu is not None and prof.speedup_vs_device is not None

    def test_cache_is_used_on_the_second_compile(self, tmp_path: Path) -> None:
        """The second compile of the same kernel is a NEFF cache hit."""
        backend = NeuronBackend(0, cache=NeffCache(tmp_path))
        assert backend.compile(ADD_KERNEL, _task()).ok
        assert backend.compile(ADD_KERNEL, _task()).log.startswith("NEFF cache hit")
