# category: elementwise
"""Scaled sum of two tensors plus a constant."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Scaled sum of two tensors plus a constant."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, y):
        return x * 2.5 + y - 1.0

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
