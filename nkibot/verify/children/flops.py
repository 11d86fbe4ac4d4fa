"""The reference's FLOPs (for the cost model's roofline), counted without TorchDynamo.

`torch.utils.flop_counter.FlopCounterMode` counts them with torch's own per-op formulas
(`flop_registry`), but in torch 2.13 every `TorchDispatchMode` subclass gets its
`__torch_dispatch__` wrapped to disable Dynamo, and the wrapper's first call imports
`torch._dynamo` (sympy, parts of inductor): 1.5 s of CPU on an idle host, 4 s wall on a
loaded one, in every reference child, for a count that compiles nothing
(`python -X importtime`, bench/time_to_verdict.py). `FlopCount` is the same count (same
formulas, same decomposition of ops without one) in a mode that opts out of that wrapper.
A higher-order operator (`torch.cond`) fails under it; under torch's counter it ran
once, and Dynamo then refused every later plain call of the same `cond` (torch 2.13),
so such a reference failed there too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

#: Metadata queries torch's counter leaves to the tensor (NotImplemented), as it does.
_METADATA = frozenset(getattr(torch.ops.aten, name).default for name in (
    "sym_is_contiguous", "is_contiguous", "is_strides_like_format",
    "is_non_overlapping_and_dense", "size", "sym_size", "stride", "sym_stride",
    "storage_offset", "sym_storage_offset", "numel", "sym_numel", "dim")) | {
    torch.ops.aten.is_contiguous.memory_format, torch.ops.prim.layout.default}


class FlopCount(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """`with FlopCount() as count: model(*inputs)`, then `count.total`."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.total = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False: no Dynamo-disabling wrapper, hence no torch._dynamo import (nothing here
        # is compiled, so the wrapper would change nothing else).
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _METADATA:
            return NotImplemented
        # An op with no formula is decomposed (under this mode) when it can be, as
        # torch's counter does; OpOverloads are never registry keys (packets are), so
        # every op is offered to decompose first, exactly as there.
        if func not in flop_registry and func is not torch.ops.prim.device.default:
            with self:
                decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out
