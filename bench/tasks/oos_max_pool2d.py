# category: out_of_scope
"""2-D max pooling."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """2-D max pooling."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.max_pool2d(x, kernel_size=2)

batch_size = 2
channels = 8
size = 32


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return []
