# category: out_of_scope
"""Cumulative product along the last dim."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cumulative product along the last dim."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.cumprod(x, dim=-1)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
