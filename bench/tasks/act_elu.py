# category: activations
"""ELU with alpha 1.0."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ELU with alpha 1.0."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.elu(x, alpha=1.0)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
