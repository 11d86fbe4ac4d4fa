"""RMSNorm with a learned weight: the README's `nkibot convert examples/rmsnorm.py::RMSNorm`."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""

    def __init__(self, dim: int = 512, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch, seq, dim = 4, 100, 512


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, seq, dim)]


def get_init_inputs() -> list[object]:
    return [dim]
