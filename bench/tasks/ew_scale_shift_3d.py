# category: elementwise
"""Per-feature scale and shift parameters broadcast over a 3-D input."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-feature scale and shift parameters broadcast over a 3-D input."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))
        self.shift = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.scale + self.shift

batch_size = 4
seq_len = 100
dim = 384


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
