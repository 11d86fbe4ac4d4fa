"""Allocating tensors: on-chip capacity accounting, NaN/4 sentinels, shared LNC outputs."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from nkibot.sim import dtypes, targets
from nkibot.sim.errors import fail
from nkibot.sim.state import current
from nkibot.sim.storage import ON_CHIP, PMAX, PSUM_OTHER, MemoryRegion, new_allocation
from nkibot.sim.tensor import NkiTensor

#: `fill=` for internal allocations that are completely written right away (skips the
#: NaN/4 sentinel pass, which nobody could observe).
OVERWRITTEN = object()


def region(buffer: Any) -> MemoryRegion:
    if isinstance(buffer, MemoryRegion):
        return buffer
    try:
        return MemoryRegion(str(buffer))
    except ValueError:
        raise fail("buffer-illegal", f"unknown buffer {buffer!r}") from None


def allocate(shape: Any, dtype: Any, buffer: Any = MemoryRegion.sbuf, name: str = "",
             fill: Any = None) -> NkiTensor:
    """A new tensor filled with NaN (floats) or 4 (ints) unless `fill` is given."""
    shp = tuple(operator.index(s) for s in (shape if isinstance(shape, tuple | list) else
                                             (shape,)))
    dt = dtypes.normalize(dtype)
    reg = region(buffer)
    st = current()
    if dtypes.name(dt) in targets.MX_DTYPE_NAMES and not targets.rule("mx_dtypes", st.target):
        raise fail("dtype-illegal", f"{dtypes.name(dt)} exists on NeuronCore-v4 (trn3) only, "
                                    f"not {st.target} ({targets.cite('mx_dtypes')})")
    if any(s < 1 for s in shp) or not shp:
        raise fail("out-of-bounds", f"allocation shape {list(shp)} must be non-empty and positive")
    if reg is MemoryRegion.shared_hbm and st.program > 0:
        return _shared_reuse(st.shared, st, shp, dt)
    tracker = None
    nbytes = 0
    if reg in ON_CHIP:
        if shp[0] > PMAX:
            raise fail("partition-dim", f"{reg.value} tensor {list(shp)} {dtypes.name(dt)}: "
                                        f"partition dim {shp[0]} exceeds 128")
        tracker = st.memory
        free = 1
        for s in shp[1:]:
            free *= s
        nbytes = tracker.take(reg.value, free * dt.itemsize, shp, dt)
    arr = np.empty(shp, dt)
    if fill is not OVERWRITTEN:
        arr.fill((np.nan if dtypes.is_float(dt) else 4) if fill is None else fill)
    state = np.zeros(shp, np.uint8) if reg is MemoryRegion.psum else None
    if state is not None and fill is not None and fill is not OVERWRITTEN:
        state.fill(PSUM_OTHER)
    t = NkiTensor(new_allocation(arr, reg, tracker, nbytes, state, st), dt, reg, name)
    if reg is MemoryRegion.shared_hbm:
        st.shared.append(t)
    return t


def _shared_reuse(shared: list[Any], st: Any, shp: tuple[int, ...],
                  dt: np.dtype[Any]) -> NkiTensor:
    # Every logical core allocates the same shared_hbm outputs; they are one tensor.
    i = st.shared_cursor
    st.shared_cursor += 1
    if i < len(shared) and shared[i].shape == shp and shared[i].dtype == dt:
        found: NkiTensor = shared[i]
        return found
    raise fail("unsupported", "logical cores allocated different shared_hbm tensors")


def wrap(arr: np.ndarray[Any, Any], buffer: MemoryRegion, name: str = "") -> NkiTensor:
    """An HBM tensor over a caller's array (writes land in the caller's array)."""
    dt = arr.dtype
    return NkiTensor(new_allocation(arr, buffer), dt, buffer, name)
