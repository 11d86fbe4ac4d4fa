# category: mlp
"""GPT-2's MLP: c_fc, the tanh GELU ("gelu_new"), c_proj, dropout (eval: identity)."""

import math

import torch
import torch.nn as nn


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class Model(nn.Module):
    def __init__(self, n_embd: int, resid_pdrop: float):
        super().__init__()
        intermediate_size = 4 * n_embd
        self.c_fc = nn.Linear(n_embd, intermediate_size)
        self.c_proj = nn.Linear(intermediate_size, n_embd)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(resid_pdrop)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


batch_size = 2
seq_len = 48
n_embd = 96


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, 0.1]
