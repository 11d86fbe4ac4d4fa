"""The static reading of forwards agrees with the lowering it estimates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nkibot.config.repo import RepoConfig
from nkibot.config.targets import TargetError, validate_target
from nkibot.convert.discovery import cst
from nkibot.convert.staticops import LOWERED_MODULES, forward_ops
from nkibot.lowering.frontend.modules import _MODULES

SRC = '''
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        y = self._helper(x) @ x.transpose(-1, -2)
        return -torch.softmax(y, dim=-1) ** 2 + self.fc(x).size(0)
    def _helper(self, x):
        return F.gelu(x)
'''


class TestStaticOps:
    def test_module_table_matches_the_lowering(self) -> None:
        """The torch-free copy of the lowering's nn.Module table is the same set."""
        assert set(_MODULES) == LOWERED_MODULES

    def test_forward_ops_follow_helpers_and_operators(self) -> None:
        """Operators, namespaced calls, methods, submodules and helper methods all count."""
        (cls,) = [s for s in cst.parse_module(SRC).body if isinstance(s, cst.ClassDef)]
        ops = forward_ops(cls)
        assert {"matmul", "transpose", "neg", "softmax", "pow", "add", "Linear", "gelu",
                "size"} <= set(ops.ops)
        assert ops.uncovered() == [] and ops.no_backend() == []


class TestCudaTargetSyntax:
    def test_cuda_targets_and_references(self) -> None:
        """`.cu`/`.cuh` targets validate; a reference must be a Python module."""
        assert validate_target("k/rms.cuh::rms") == "k/rms.cuh::rms"
        config = RepoConfig.model_validate({"references": {"k/rms.cu::rms": "m/n.py::RMSNorm"}})
        assert config.references == {"k/rms.cu::rms": "m/n.py::RMSNorm"}
        with pytest.raises(TargetError, match=r"\.cu"):
            validate_target("k/rms.txt::rms")
        with pytest.raises(ValidationError, match="must be a PyTorch module"):
            RepoConfig.model_validate({"references": {"k/a.cu::a": "k/b.cu::b"}})
