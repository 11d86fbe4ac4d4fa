# category: norms
"""LayerNorm with affine parameters."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LayerNorm with affine parameters."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        nn.init.normal_(self.ln.weight)
        nn.init.normal_(self.ln.bias)

    def forward(self, x):
        return self.ln(x)

batch_size = 4
seq_len = 80
dim = 768


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
