# category: norms
"""L1 normalisation of each row."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """L1 normalisation of each row."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
