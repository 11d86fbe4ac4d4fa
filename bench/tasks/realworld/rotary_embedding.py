# category: attention
"""Llama's rotary position embedding applied to q and k: cos/sin tables built from
inv_freq, rotate_half by slicing and cat, q * cos + rotate_half(q) * sin."""

import torch
import torch.nn as nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim: int, max_position_embeddings: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        t = torch.arange(max_position_embeddings).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=True)
        self.register_buffer("sin_cached", emb.sin(), persistent=True)

    def forward(self, q, k):
        seq_len = q.shape[-2]
        cos = self.cos_cached[:seq_len].unsqueeze(0).unsqueeze(0)
        sin = self.sin_cached[:seq_len].unsqueeze(0).unsqueeze(0)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed


batch_size = 2
num_heads = 4
seq_len = 64
head_dim = 32


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim),
            torch.randn(batch_size, num_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim, seq_len, 10000.0]
