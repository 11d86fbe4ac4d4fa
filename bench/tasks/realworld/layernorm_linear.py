# category: norm
"""A pre-LN projection: LayerNorm then Linear, as a transformer's attention input or a
classifier head (ViT's `head(norm(x))`)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int, out_features: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, out_features)

    def forward(self, x):
        return self.head(self.norm(x))


batch_size = 4
tokens = 50
dim = 96
out_features = 160


def get_inputs():
    return [torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [dim, out_features]
