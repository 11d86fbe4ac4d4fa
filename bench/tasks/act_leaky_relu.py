# category: activations
"""LeakyReLU with slope 0.01."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LeakyReLU with slope 0.01."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=0.01)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
