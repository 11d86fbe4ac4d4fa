"""A stress trial's inputs, made from a normal trial's inside the torch child.

- "scale": floats times `value`, with random signs (large magnitude, overflow scale);
- "offset": floats plus `value` (the +-100 trials);
- "special": a quarter of the float elements replaced by special values, and an eighth
  by a tie with their neighbour. The special values are exact zeros of both signs, +-1
  and the dtype's smallest normal. The upper edge is the overflow scale trial's, not this
  one's: a large power of two (2**31 in fp32) mixed into a contraction cancels against its
  neighbours, and the fp32 reference itself is then off by hundreds (ulp(2**31) = 256), so
  honest matmuls and convolutions that sum in another order failed here (KernelBench
  level 1 15, level 2 1, 15 and 31, level 3 25). The reference shows where the operator's
  domain ends: a NaN in its output marks that input outside it (`verify.stats`).

Integer and boolean inputs, and Python scalars (compile-time constants), are left alone.
"""

from __future__ import annotations

from typing import Any

import torch

#: The share of float elements given a special value, and the share made a tie.
SPECIAL_SHARE = 0.25
TIE_SHARE = 0.125


def transform(inputs: list[Any], seed: int, kind: str | None, value: float) -> list[Any]:
    if kind is None:
        return inputs
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            out.append(t)
        elif kind == "scale":
            signs = torch.where(torch.rand(t.shape, generator=gen) < 0.5, -1.0, 1.0)
            out.append((t.float() * signs * value).to(t.dtype))
        elif kind == "special":
            out.append(special(t, gen))
        else:
            out.append((t.float() + value).to(t.dtype))
    return out


def special_values(dtype: torch.dtype) -> torch.Tensor:
    """Zeros of both signs, +-1 and +-the smallest normal."""
    info = torch.finfo(dtype)
    return torch.tensor([0.0, -0.0, 1.0, -1.0, info.tiny, -info.tiny])


def special(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    flat = t.float().flatten()
    if flat.numel() == 0:
        return t
    values = special_values(t.dtype)
    pick = torch.rand(flat.numel(), generator=gen)
    which = torch.randint(0, len(values), (flat.numel(),), generator=gen)
    flat = torch.where(pick < SPECIAL_SHARE, values[which], flat)
    tie = (pick >= SPECIAL_SHARE) & (pick < SPECIAL_SHARE + TIE_SHARE)
    flat = torch.where(tie, torch.roll(flat, 1), flat)
    return flat.reshape(t.shape).to(t.dtype)
