# category: matmul
"""Rectangular product with sizes that are not tile multiples."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Rectangular product with sizes that are not tile multiples."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return a @ b

m = 200
k = 300
n = 600


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
