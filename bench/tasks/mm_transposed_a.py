# category: matmul
"""Product with the first operand transposed."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Product with the first operand transposed."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.matmul(a.T, b)

m = 160
k = 256
n = 192


def get_inputs():
    return [torch.randn(k, m), torch.randn(k, n)]


def get_init_inputs():
    return []
