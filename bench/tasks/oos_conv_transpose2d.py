# category: out_of_scope
"""Transposed 2-D convolution."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Transposed 2-D convolution."""

    def __init__(self, channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(channels, 4, kernel_size=3)

    def forward(self, x):
        return self.deconv(x)

batch_size = 2
channels = 8
size = 16


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
