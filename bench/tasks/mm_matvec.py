# category: matmul
"""Matrix-vector product."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Matrix-vector product."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.matmul(a, b)

m = 300
k = 512


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, 1)]


def get_init_inputs():
    return []
