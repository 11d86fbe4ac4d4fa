# category: losses
"""Mean of 1 - cosine similarity between rows."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean of 1 - cosine similarity between rows."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, predictions, targets):
        cos = F.cosine_similarity(predictions, targets, dim=1)
        return torch.mean(1 - cos)

batch_size = 300
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
