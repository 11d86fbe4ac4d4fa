# category: softmax
"""Softmax over dim 1 of a 3-D tensor (a middle dim)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Softmax over dim 1 of a 3-D tensor (a middle dim)."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.softmax(x, dim=1)

batch_size = 4
channels = 150
length = 40


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
