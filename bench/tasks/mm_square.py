# category: matmul
"""Square matrix product."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Square matrix product."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.matmul(a, b)

n = 256


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return []
