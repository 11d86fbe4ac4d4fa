# category: softmax
"""Softmax over the last dim."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Softmax over the last dim."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.softmax(x, dim=-1)

batch_size = 300
dim = 1000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
