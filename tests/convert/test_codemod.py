"""`integrate: dispatch`: forward routes to the kernel on Neuron, PyTorch everywhere else."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import torch

from nkibot.convert.codemod import TORCH_FORWARD, CodemodError, integrate_dispatch

MODULE = textwrap.dedent('''
    import torch
    from torch import nn


    class Scale(nn.Module):
        """y = x * weight + bias."""

        def __init__(self, dim: int = 8) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.full((dim,), 2.0))
            self.register_buffer("bias", torch.ones(dim))

        @torch.no_grad()
        def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
            return x * self.weight * scale + self.bias
''')

# Stands in for the NKI kernel: same calling convention, records that it ran.
FAKE_KERNEL = textwrap.dedent('''
    CALLS = []


    def scale_kernel(x, weight, bias):
        CALLS.append((x, weight, bias))
        return "kernel-result"
''')


def integrate(src: str = MODULE) -> str:
    return integrate_dispatch(src, class_name="Scale", module_path="src/models/scale.py",
                              kernel_path="nki_kernels/scale_nki.py", function="scale_kernel",
                              n_inputs=1, state_keys=["weight", "bias"])


def load(repo: Path, text: str) -> ModuleType:
    path = repo / "src" / "models" / "scale.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    (repo / "nki_kernels").mkdir(exist_ok=True)
    (repo / "nki_kernels" / "scale_nki.py").write_text(FAKE_KERNEL)
    spec = importlib.util.spec_from_file_location("scale_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeNeuronTensor:
    """Only what the dispatcher looks at: a `.device.type` of "xla"."""

    class device:  # mirrors torch.Tensor.device
        type = "xla"


class TestIntegrateDispatch:
    def test_cpu_keeps_the_pytorch_path(self, tmp_path: Path) -> None:
        """On CPU the rewritten module computes exactly what the original did."""
        module = load(tmp_path, integrate())
        x = torch.randn(3, 8)
        got = module.Scale()(x, scale=0.5)
        assert torch.equal(got, x * 2.0 * 0.5 + 1.0)
        assert hasattr(module.Scale, TORCH_FORWARD)

    def test_neuron_tensors_route_to_the_kernel(self, tmp_path: Path) -> None:
        """Inputs on a Neuron device call the kernel with inputs then state_dict tensors."""
        module = load(tmp_path, integrate())
        model = module.Scale()
        x = FakeNeuronTensor()
        assert model(x) == "kernel-result"
        assert module._nkibot_on_neuron((x,)) and not module._nkibot_on_neuron((torch.ones(1),))

    def test_signature_decorators_and_docs_survive(self) -> None:
        """The new forward keeps the parameters, annotations and decorators of the old one."""
        text = integrate()
        assert "def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:" in text
        assert text.count("@torch.no_grad()") == 2
        assert f"return self.{TORCH_FORWARD}(x, scale=scale)" in text
        assert "'../../nki_kernels/scale_nki.py'" in text
        assert '"""y = x * weight + bias."""' in text

    def test_is_idempotent(self) -> None:
        """Integrating an already integrated module changes nothing (retries stay clean)."""
        once = integrate()
        assert integrate(once) == once

    def test_missing_class_or_forward_is_explained(self) -> None:
        """A missing class or a class without its own forward raises CodemodError."""
        with pytest.raises(CodemodError, match="no top-level class"):
            integrate("x = 1\n")
        with pytest.raises(CodemodError, match="defines no forward"):
            integrate("class Scale:\n    pass\n")
