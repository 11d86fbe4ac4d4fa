# category: elementwise
"""Square roots, reciprocal square roots and reciprocals."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Square roots, reciprocal square roots and reciprocals."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, y):
        return torch.sqrt(x.abs() + 1.0) * torch.rsqrt(y * y + 1.0) + torch.reciprocal(x * x + 2.0)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
