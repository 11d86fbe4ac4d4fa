# category: elementwise
"""Absolute value shifted and clamped to [0, 1]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Absolute value shifted and clamped to [0, 1]."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.clamp(x.abs() - 0.5, min=0.0, max=1.0)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
