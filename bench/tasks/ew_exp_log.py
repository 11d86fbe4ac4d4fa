# category: elementwise
"""log(1 + exp(x / 2)) written out with exp and log."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """log(1 + exp(x / 2)) written out with exp and log."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.log(torch.exp(x * 0.5) + 1.0)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
