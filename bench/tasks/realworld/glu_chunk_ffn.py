# category: mlp
"""A GLU feed-forward as T5/PaLM-style code writes it with one fused projection:
wi(x).chunk(2, dim=-1), GELU(gate) * up, wo."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.wi = nn.Linear(d_model, 2 * d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        gate, up = self.wi(x).chunk(2, dim=-1)
        return self.wo(F.gelu(gate) * up)


batch_size = 2
seq_len = 40
d_model = 64
d_ff = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_ff]
