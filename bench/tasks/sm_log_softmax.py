# category: softmax
"""LogSoftmax over dim 1."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LogSoftmax over dim 1."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.log_softmax(x, dim=1)

batch_size = 256
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
