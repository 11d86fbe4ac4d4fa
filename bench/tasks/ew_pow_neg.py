# category: elementwise
"""Cubic polynomial with negation and powers."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cubic polynomial with negation and powers."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return -(x ** 3) + 0.5 * x ** 2 - x

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
