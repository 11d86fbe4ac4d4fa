# category: out_of_scope
"""1-D average pooling."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """1-D average pooling."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=4)

    def forward(self, x):
        return self.pool(x)

batch_size = 4
channels = 8
length = 128


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
