# category: reductions
"""Sum over dim 1 of a 3-D tensor (a middle dim)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Sum over dim 1 of a 3-D tensor (a middle dim)."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)

batch_size = 8
dim1 = 200
dim2 = 72


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
