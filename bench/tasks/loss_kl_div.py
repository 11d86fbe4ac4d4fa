# category: losses
"""KL divergence between two softmax distributions (batchmean)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """KL divergence between two softmax distributions (batchmean)."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction='batchmean')

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim).softmax(dim=-1), torch.randn(batch_size, dim).softmax(dim=-1)]


def get_init_inputs():
    return []
