# category: activations
"""GELU, tanh approximation written out (minGPT's NewGELU)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GELU, tanh approximation written out (minGPT's NewGELU)."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
