"""The MCP discover tool carries the repository scan's ranking, coverage and CUDA kernels."""

from __future__ import annotations

from pathlib import Path

from nkibot.mcp.discover import discover_tree
from nkibot.mcp.workspace import Workspace

NORM = '''import torch
from torch import nn

class RMSNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

class Picky(nn.Module):
    def forward(self, x):
        return torch.unique(x)
'''


class TestRankedDiscover:
    def test_entries_gain_scan_fields_and_cuda(self, tmp_path: Path) -> None:
        """Modules get lowering/calls/no_backend and a rank; CUDA kernels are listed."""
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "norm.py").write_text(NORM)
        (tmp_path / "src" / "rms.cu").write_text("__global__ void rms(float* x) {}\n")
        found = discover_tree(Workspace.at(tmp_path), tmp_path / "src", describe=lambda t: None)
        entries = {e["target"]: e for e in found["candidates"]}
        norm, picky = entries["src/norm.py::RMSNorm"], entries["src/norm.py::Picky"]
        assert norm["lowering"] and norm["rank"] == 1 and norm["no_backend"] == []
        assert picky["no_backend"] == ["unique"] and not picky["lowering"]
        assert entries["src/rms.cu::rms"]["kind"] == "cuda"
