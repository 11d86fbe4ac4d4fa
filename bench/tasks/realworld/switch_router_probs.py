# category: moe
"""A Switch-Transformer-style router's probabilities and its load-balancing inputs:
logits from a bias-free linear, softmax over experts, the mean probability per expert."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int):
        super().__init__()
        self.classifier = nn.Linear(hidden_size, num_experts, bias=False)

    def forward(self, hidden_states):
        router_logits = self.classifier(hidden_states)
        router_probs = nn.functional.softmax(router_logits, dim=-1)
        tokens_per_expert = router_probs.mean(dim=1)
        return router_probs, tokens_per_expert


batch_size = 4
seq_len = 32
hidden_size = 96
num_experts = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_experts]
