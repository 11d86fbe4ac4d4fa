# category: norm
"""LlamaRMSNorm (in fp32, then weight) feeding the q/k/v projections of the next layer."""

import torch
import torch.nn as nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Model(nn.Module):
    def __init__(self, hidden_size: int, kv_size: int):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(hidden_size)
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, kv_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, kv_size, bias=False)

    def forward(self, hidden_states):
        hidden_states = self.input_layernorm(hidden_states)
        return self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)


batch_size = 2
seq_len = 64
hidden_size = 128
kv_size = 32


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, kv_size]
