# category: reductions
"""Min over dim 1 of a 3-D tensor (values only)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Min over dim 1 of a 3-D tensor (values only)."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.min(x, dim=1)[0]

batch_size = 8
dim1 = 130
dim2 = 96


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
