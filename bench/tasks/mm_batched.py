# category: matmul
"""Batched matrix product."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Batched matrix product."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.bmm(a, b)

batch_size = 4
m = 130
k = 96
n = 200


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
