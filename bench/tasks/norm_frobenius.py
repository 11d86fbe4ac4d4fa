# category: norms
"""Division by the Frobenius norm of the whole tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Division by the Frobenius norm of the whole tensor."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        norm = torch.norm(x, p='fro')
        return x / norm

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
