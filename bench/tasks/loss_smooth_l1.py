# category: losses
"""Smooth L1 (Huber) loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Smooth L1 (Huber) loss."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
