"""`NkiTensor.ap`: an explicit `[[stride, count], ...]` access pattern over storage."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nkibot.sim.errors import fail
from nkibot.sim.storage import PMAX, Handle

Arr = np.ndarray[Any, Any]


def _address(arr: Arr) -> int:
    return int(arr.__array_interface__["data"][0])


def access_pattern(h: Handle, on_chip: bool, what: str, pattern: Any, offset: int | None,
                   dt: np.dtype[Any]) -> tuple[Arr, Arr | None]:
    """Address the handle's whole allocation with element strides, bounds-checked.

    Returns the values view and, when the dtype is unchanged, the PSUM state view.
    """
    base = h.alloc.base
    flat = base.reshape(-1)
    if dt.itemsize != base.itemsize:
        flat = flat.view(dt)
    start = (_address(h.arr) - _address(base)) // dt.itemsize + (offset or 0)
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    counts = tuple(c for _, c in pairs)
    lo = start + sum(min(0, (c - 1) * s) for s, c in pairs)
    hi = start + sum(max(0, (c - 1) * s) for s, c in pairs)
    if any(c < 1 for c in counts) or lo < 0 or hi >= flat.size:
        raise fail("out-of-bounds", f".ap(pattern={[list(p) for p in pairs]}, offset={offset}) "
                                    f"addresses elements {lo}..{hi} of an allocation of "
                                    f"{flat.size} ({what})")
    if on_chip and counts[0] > PMAX:
        raise fail("partition-dim", f".ap pattern partition count {counts[0]} exceeds 128")
    arr = as_strided(flat[start:], shape=counts, strides=[s * dt.itemsize for s, _ in pairs])
    state = None
    sbase = h.alloc.state
    if sbase is not None and dt == h.arr.dtype:
        state = as_strided(sbase.reshape(-1)[start:], shape=counts, strides=[s for s, _ in pairs])
    return arr, state


def check_partition_step(h: Handle, pattern: Any, dt: np.dtype[Any], what: str) -> None:
    """An SBUF/PSUM pattern's partition step must be the free size of the allocation.

    nki/deep-dives/nki-aps.rst:190-195: on NeuronCore v2/v3/v4 the partition access is
    contiguous, so the leading step equals the element count of the whole free dimension
    (reading every other partition is illegal). One partition accessed: any step.
    """
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    base = h.alloc.base
    row = base.strides[0] // dt.itemsize if base.ndim else 1
    if pairs and pairs[0][1] > 1 and pairs[0][0] != row:
        raise fail("view-illegal", f".ap(pattern={[list(p) for p in pairs]}) on {what}: the "
                                   f"partition step {pairs[0][0]} must be the allocation's "
                                   f"free size {row} (partition access is contiguous, "
                                   "nki/deep-dives/nki-aps.rst:190-195)")
