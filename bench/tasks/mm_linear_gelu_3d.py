# category: matmul
"""Linear projection of a 3-D input with a GELU and scaling epilogue."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear projection of a 3-D input with a GELU and scaling epilogue."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.proj = nn.Linear(dim, hidden)

    def forward(self, x):
        return F.gelu(self.proj(x)) * 0.5

batch_size = 2
seq_len = 100
dim = 256
hidden = 320


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden]
