# category: moe
"""Mixtral's sparse-MoE router: gate logits, softmax in fp32, top-2 experts, the two
weights renormalised to sum to 1."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden_dim: int, num_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        return routing_weights, selected_experts


batch_size = 2
seq_len = 64
hidden_dim = 128
num_experts = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_dim)]


def get_init_inputs():
    return [hidden_dim, num_experts, 2]
