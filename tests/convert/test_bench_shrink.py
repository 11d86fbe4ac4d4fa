"""bench/shrink.py: inputs shrink to the budget; with COUNT_WEIGHTS the weights do too, else
they fit OUTPUT_SHARE times the budget, as the outputs always do; and list-valued size
constants (level 3's `layer_sizes = [...]`) shrink and stay lists."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "shrink.py"
    spec = importlib.util.spec_from_file_location("bench_shrink", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_shrink"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SHRINK = _load()

MLP = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        sizes = [input_size] + layer_sizes + [output_size]
        self.net = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])

    def forward(self, x):
        return self.net(x)


batch_size = 4
input_size = 2048
layer_sizes = [4096, 4096]
output_size = 1024


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]
'''


@pytest.fixture
def count_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SHRINK, "COUNT_WEIGHTS", True)


def test_weights_get_a_share_by_default() -> None:
    """Without COUNT_WEIGHTS the 29M weights must fit OUTPUT_SHARE (16) times the bound:
    at 4M nothing changes (the 4 x 2048 input fits); at 1M the layers shrink, less than
    when the weights must fit the bound itself."""
    assert SHRINK.shrink_source(MLP, 1 << 22).changed == {}
    shrunk = SHRINK.shrink_source(MLP, 1 << 20)
    assert shrunk.fits and "layer_sizes" in shrunk.changed
    weights = SHRINK._sizes(shrunk.source)[0][-2] * SHRINK.OUTPUT_SHARE
    assert 1 << 20 < weights <= SHRINK.OUTPUT_SHARE << 20


@pytest.mark.usefixtures("count_weights")
def test_weights_counted_and_lists_shrunk() -> None:
    shrunk = SHRINK.shrink_source(MLP, 1 << 20)
    assert shrunk.fits and "layer_sizes" in shrunk.changed
    assert "layer_sizes = [" in shrunk.source  # still a list: `[input_size] + layer_sizes`
    sizes, _ = SHRINK._sizes(shrunk.source)
    assert sizes[-2] <= 1 << 20  # the weights, all together (the outputs' share is last)


UPSAMPLE = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, kernel_size=4, stride=4)

    def forward(self, x):
        return self.up(x)


batch_size = 8
in_channels = 4
out_channels = 64
size = 64


def get_inputs():
    return [torch.rand(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]
'''


def test_outputs_many_times_the_input_are_shrunk_too() -> None:
    """An input of 131k elements fits 1M, but its transposed conv's 33.5M outputs are over
    16 x 1M: shrinking goes on until the outputs fit their share."""
    budget = 1 << 20
    assert SHRINK._sizes(UPSAMPLE)[0][-1] > budget  # the outputs' share (over 16)
    shrunk = SHRINK.shrink_source(UPSAMPLE, budget)
    assert shrunk.fits and shrunk.changed
    sizes, _ = SHRINK._sizes(shrunk.source)
    assert sizes[-1] <= budget
    assert sizes[0] <= 8 * 4 * 64 * 64  # the input never grows


def test_a_large_intermediate_is_shrunk_too() -> None:
    """The transposed conv's 33.5M elements are pooled down to 8 numbers, but the simulator
    still writes and reads them through HBM: the largest intermediate has the outputs' share."""
    pooled = UPSAMPLE.replace("return self.up(x)", "return self.up(x).amax(dim=(1, 2, 3))")
    assert pooled != UPSAMPLE
    budget = 1 << 20
    assert SHRINK._sizes(pooled)[0][-1] > budget
    shrunk = SHRINK.shrink_source(pooled, budget)
    assert shrunk.fits and shrunk.changed
    assert SHRINK._sizes(shrunk.source)[0][-1] <= budget


ITEM = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        rates = [x.item() for x in torch.linspace(0, 0.1, depth)]  # Swin's drop-path rule
        self.rates = rates
        self.net = nn.Sequential(*[nn.Linear(width, width) for _ in rates])

    def forward(self, x):
        return self.net(x)


batch_size = 8
width = 1024
depth = 4


def get_inputs():
    return [torch.rand(batch_size, width)]


def get_init_inputs():
    return [width, depth]
'''


@pytest.mark.usefixtures("count_weights")
def test_constructor_reading_a_tensor_value_shrinks() -> None:
    """`.item()` in the constructor (KernelBench level 3 29/30, Swin) cannot run on meta:
    the model is built on the CPU and moved to meta, so its weights are counted and shrink."""
    shrunk = SHRINK.shrink_source(ITEM, 1 << 20)
    assert shrunk.fits and "width" in shrunk.changed
    task = SHRINK.meta_task(shrunk.source, "item.py")
    assert [s.shape for s in task.state_dict][:2] == [(256, 256), (256,)]
