# category: embedding
"""GPT-2's input embedding: token embedding plus learned position embedding of
arange(seq_len), then dropout (eval: identity)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocab_size: int, n_positions: int, n_embd: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(0.1)

    def forward(self, input_ids):
        seq_length = input_ids.shape[-1]
        position_ids = torch.arange(0, seq_length, dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        return self.drop(hidden_states)


batch_size = 4
seq_len = 32
vocab_size = 1000
n_positions = 64
n_embd = 64


def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab_size, n_positions, n_embd]
