"""Row softmax with a temperature, as in attention scores."""

import torch
from torch import nn


class Softmax(nn.Module):
    """y = softmax(x / temperature) over the last dim."""

    def __init__(self, temperature: float = 2.0) -> None:
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=-1)


rows, cols = 300, 1000


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list[object]:
    return [2.0]
