# category: norms
"""L2 normalisation of each row."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """L2 normalisation of each row."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.normalize(x, p=2.0, dim=1)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
