"""Reference for the class 5 attacks: a row softmax."""

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return []
