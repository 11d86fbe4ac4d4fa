# category: softmax
"""Attention-style softmax of scaled 4-D scores."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Attention-style softmax of scaled 4-D scores."""

    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return F.softmax(x / self.temperature, dim=-1)

batch_size = 2
heads = 4
seq_len = 50


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len)]


def get_init_inputs():
    return [8.0]
