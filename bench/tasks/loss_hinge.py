# category: losses
"""Hinge loss against +-1 targets."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Hinge loss against +-1 targets."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))

batch_size = 256


def get_inputs():
    return [torch.randn(batch_size, 1), torch.randint(0, 2, (batch_size, 1)).float() * 2 - 1]


def get_init_inputs():
    return []
