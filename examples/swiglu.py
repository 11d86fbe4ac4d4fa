"""SwiGLU activation of a gated MLP: the input holds [value | gate] halves on its last dim."""

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """y = value * silu(gate), where x = cat([value, gate], dim=-1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = x.chunk(2, dim=-1)
        return value * F.silu(gate)


batch, seq, hidden = 2, 100, 256


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, seq, 2 * hidden)]


def get_init_inputs() -> list[object]:
    return []
