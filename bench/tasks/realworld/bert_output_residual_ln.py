# category: norm
"""HF BertSelfOutput: dense, dropout (eval: identity), LayerNorm of the residual sum."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size: int, layer_norm_eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


batch_size = 2
seq_len = 64
hidden_size = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size), torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, 1e-12]
