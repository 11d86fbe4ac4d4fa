"""Repository discovery: kinds, shapes, lowering coverage, call counts, ranking, CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.config.repo import RepoConfig
from nkibot.convert.cuda import find_kernel, global_functions, inline_kernels
from nkibot.convert.scan import KernelCandidate, discover_path, discover_sources, selected

NORM = '''
import torch
from torch import nn

class RMSNorm(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

def get_inputs():
    return [torch.randn(B, D)]

B = 8
D = 256
'''
MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn
from pkg.norm import RMSNorm

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(128)
        self.fc = nn.Linear(128, 128)
    def forward(self, x):
        return F.silu(self.fc(self.norm(x))) + self.norm(x)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

class Gather(nn.Module):
    def forward(self, x):
        return x[torch.nonzero(x > 0)].sum()

class Up(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2)
    def forward(self, x):
        return self.up(x)
'''
CUDA = '''// comment: __global__ void not_me(int)
template <int N>
__global__ void __launch_bounds__(128) rms_norm_kernel(const float* x, float* y) {}
/* __global__ void also_not_me() */
__global__
void add_kernel(float* a) {}
'''
INLINE = '''
from torch.utils.cpp_extension import load_inline
SRC = """
__global__ void scale_kernel(float* x, float s) { x[threadIdx.x] *= s; }
"""
ext = load_inline(name="scale", cpp_sources="", cuda_sources=[SRC])
'''


def by_target(found: list[KernelCandidate]) -> dict[str, KernelCandidate]:
    return {c.target: c for c in found}


class TestDiscoverSources:
    def test_kinds_shapes_and_coverage(self) -> None:
        """Modules get static shapes from get_inputs() and a lowering estimate per forward."""
        found = by_target(discover_sources({"pkg/norm.py": NORM, "pkg/model.py": MODEL}))
        norm = found["pkg/norm.py::RMSNorm"]
        assert norm.kind_label == "nn.Module" and norm.shapes == ("x=8x256xfloat32",)
        assert norm.lowering and norm.shapes_from == "get_inputs()"
        assert found["pkg/model.py::Block"].lowering  # Linear, silu and a covered RMSNorm
        assert found["pkg/model.py::Net"].lowering  # loops over covered Blocks
        up = found["pkg/model.py::Up"]
        assert not up.lowering and up.uncovered == ("Upsample",)
        assert up.shapes == () and up.shapes_from is None  # needs shapes

    def test_call_counts_rank_hot_modules_first(self) -> None:
        """RMSNorm is called twice from Block's forward, Block once from Net's loop."""
        found = discover_sources({"pkg/norm.py": NORM, "pkg/model.py": MODEL})
        calls = {c.target.split("::")[1]: c.calls for c in found}
        assert calls["RMSNorm"] == 2 and calls["Block"] == 1 and calls["Net"] == 0
        order = [c.target.split("::")[1] for c in found]
        assert order[:3] == ["RMSNorm", "Block", "Net"]
        assert order[-1] == "Gather"  # no backend can express it: last

    def test_ops_no_backend_can_express_are_named(self) -> None:
        """A data-dependent output shape (nonzero) is reported up front."""
        gather = by_target(discover_sources({"m.py": MODEL}))["m.py::Gather"]
        assert gather.no_backend == ("nonzero",) and not gather.lowering

    def test_cuda_kernels_take_their_reference_coverage(self) -> None:
        """A CUDA kernel with a configured reference inherits its coverage and shapes."""
        config = RepoConfig.model_validate({"references": {
            "k/rms.cu::rms_norm_kernel": "pkg/norm.py::RMSNorm"}})
        found = by_target(discover_sources({"k/rms.cu": CUDA, "pkg/norm.py": NORM,
                                            "pkg/ext.py": INLINE}, config=config))
        cuda = found["k/rms.cu::rms_norm_kernel"]
        assert cuda.kind_label == "CUDA" and cuda.lowering and cuda.line == 3
        assert cuda.reference == "pkg/norm.py::RMSNorm" and cuda.shapes == ("x=8x256xfloat32",)
        assert not found["k/rms.cu::add_kernel"].lowering
        assert found["pkg/ext.py::scale_kernel"].kind == "cuda"

    def test_globs_and_excludes(self) -> None:
        """`scan:` globs select files, `exclude:` drops them, a narrowing glob applies on top."""
        config = RepoConfig.model_validate({"scan": ["pkg/*"], "exclude": ["*/model.py"]})
        found = discover_sources({"pkg/norm.py": NORM, "pkg/model.py": MODEL, "x.py": NORM},
                                 config=config)
        assert [c.target for c in found] == ["pkg/norm.py::RMSNorm"]
        assert discover_sources({"pkg/norm.py": NORM}, globs=("other/",)) == []
        assert selected("a/b.cu", ()) and not selected("a/b.txt", ())

    def test_unparsable_files_are_skipped(self) -> None:
        """A file with a syntax error offers nothing and does not stop the scan."""
        found = discover_sources({"bad.py": "class (:\n", "pkg/norm.py": NORM})
        assert [c.target for c in found] == ["pkg/norm.py::RMSNorm"]


class TestDiscoverPath:
    def test_directory_with_its_config(self, tmp_path: Path) -> None:
        """discover_path reads a tree and its .github/nki-bot.yml (the MCP tool's entry)."""
        (tmp_path / "pkg").mkdir()
        (tmp_path / "pkg" / "norm.py").write_text(NORM)
        (tmp_path / "kernels").mkdir()
        (tmp_path / "kernels" / "rms.cu").write_text(CUDA)
        (tmp_path / ".github").mkdir()
        (tmp_path / ".github" / "nki-bot.yml").write_text(
            "references:\n  kernels/rms.cu::rms_norm_kernel: pkg/norm.py::RMSNorm\n")
        found = by_target(discover_path(tmp_path))
        assert found["kernels/rms.cu::rms_norm_kernel"].lowering
        assert found["pkg/norm.py::RMSNorm"].calls == 0

    def test_single_file_and_missing_path(self, tmp_path: Path) -> None:
        """A file is discovered on its own; a missing path raises FileNotFoundError."""
        (tmp_path / "norm.py").write_text(NORM)
        assert [c.target for c in discover_path(tmp_path / "norm.py")] == ["norm.py::RMSNorm"]
        with pytest.raises(FileNotFoundError):
            discover_path(tmp_path / "nope")


class TestCuda:
    def test_global_functions_skip_comments(self) -> None:
        """Commented-out kernels are not found; line numbers stay those of the file."""
        assert [(k.name, k.line) for k in global_functions(CUDA)] == [
            ("rms_norm_kernel", 3), ("add_kernel", 6)]

    def test_load_inline_sources(self) -> None:
        """CUDA passed to load_inline by name is found, with its source."""
        (kernel,) = inline_kernels(INLINE)
        assert kernel.name == "scale_kernel" and "threadIdx" in kernel.source
        assert find_kernel("pkg/ext.py", INLINE, "scale_kernel") is not None
        assert find_kernel("k.cu", CUDA, "missing") is None
