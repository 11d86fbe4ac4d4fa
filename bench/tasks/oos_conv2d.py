# category: out_of_scope
"""2-D convolution."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """2-D convolution."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, 16, kernel_size=3)

    def forward(self, x):
        return self.conv(x)

batch_size = 2
channels = 3
size = 32


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
