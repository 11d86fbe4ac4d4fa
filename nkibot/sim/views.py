"""`NkiTensor.ap`: an explicit `[[stride, count], ...]` access pattern over storage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkibot.sim import dtypes
from nkibot.sim.errors import fail

if TYPE_CHECKING:
    from nkibot.sim.tensor import NkiTensor


def _address(arr: np.ndarray[Any, Any]) -> int:
    return int(arr.__array_interface__["data"][0])


def access_pattern(t: NkiTensor, pattern: Any, offset: int | None,
                   dtype: Any) -> NkiTensor:
    """Address the tensor's whole allocation with element strides, bounds-checked."""
    base = t._alloc.base
    dt = t.dtype if dtype is None else dtypes.normalize(dtype)
    flat = base.reshape(-1)
    if dt.itemsize != base.itemsize:
        flat = flat.view(dt)
    # `.ap` addresses storage: an explicit offset ignores the view's own offset.
    start = ((_address(t._arr) - _address(base)) // dt.itemsize if offset is None
             else int(offset))
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    counts = tuple(c for _, c in pairs)
    lo = start + sum(min(0, (c - 1) * s) for s, c in pairs)
    hi = start + sum(max(0, (c - 1) * s) for s, c in pairs)
    if any(c < 1 for c in counts) or lo < 0 or hi >= flat.size:
        raise fail("out-of-bounds", f".ap(pattern={[list(p) for p in pairs]}, offset={offset}) "
                                    f"addresses elements {lo}..{hi} of an allocation of "
                                    f"{flat.size} ({t.describe()})")
    if t.on_chip and counts[0] > 128:
        raise fail("partition-dim", f".ap pattern partition count {counts[0]} exceeds 128")
    arr = as_strided(flat[start:], shape=counts, strides=[s * dt.itemsize for s, _ in pairs])
    state = None
    sbase = t._alloc.state
    if sbase is not None and dt == t.dtype:
        state = as_strided(sbase.reshape(-1)[start:], shape=counts, strides=[s for s, _ in pairs])
    return t._derive(arr, state, dtype=dt)
