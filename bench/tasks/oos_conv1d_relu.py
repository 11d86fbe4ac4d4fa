# category: out_of_scope
"""1-D convolution followed by ReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """1-D convolution followed by ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, 8, kernel_size=5)

    def forward(self, x):
        return torch.relu(self.conv(x))

batch_size = 4
channels = 4
length = 128


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels]
