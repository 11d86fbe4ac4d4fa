# category: losses
"""L1 loss with sum reduction."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """L1 loss with sum reduction."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, predictions, targets):
        return F.l1_loss(predictions, targets, reduction='sum')

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
