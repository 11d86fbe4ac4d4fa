# category: reductions
"""Mean over the last dim of a 3-D tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean over the last dim of a 3-D tensor."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.mean(x, dim=-1)

batch_size = 4
seq_len = 90
dim = 256


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return []
