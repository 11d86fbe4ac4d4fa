# category: elementwise
"""Difference divided by a positive squared denominator."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Difference divided by a positive squared denominator."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, y):
        return (x - y) / (y.abs() + 1.0) ** 2

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
