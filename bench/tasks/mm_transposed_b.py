# category: matmul
"""Product with the second operand transposed."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Product with the second operand transposed."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.matmul(a, b.T)

m = 160
k = 256
n = 192


def get_inputs():
    return [torch.randn(m, k), torch.randn(n, k)]


def get_init_inputs():
    return []
