"""Allocating tensors: on-chip capacity accounting, NaN/4 sentinels, shared LNC outputs."""

from __future__ import annotations

import gc
import operator
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.sim import dtypes, targets
from nkibot.sim.errors import SimError, fail
from nkibot.sim.state import current
from nkibot.sim.storage import ON_CHIP, PMAX, PSUM_OTHER, MemoryRegion, handle, new_allocation
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
    shp = tuple([operator.index(s) for s in (shape if isinstance(shape, tuple | list) else
                                              (shape,))])
    dt = dtypes.normalize(dtype)
    reg = region(buffer)
    st = current()
    if dtypes.name(dt) in targets.MX_DTYPE_NAMES and not targets.rule("mx_dtypes", st.target):
        raise fail("dtype-illegal", f"{dtypes.name(dt)} exists on NeuronCore-v4 (trn3) only, "
                                    f"not {st.target} ({targets.cite('mx_dtypes')})")
    if not shp or min(shp) < 1:
        raise fail("out-of-bounds", f"allocation shape {list(shp)} must be non-empty and positive")
    if reg is MemoryRegion.shared_hbm and st.shared_cursor < len(st.shared):
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
        site = _site()
        try:
            nbytes = tracker.take(reg.value, free * dt.itemsize, shp, dt)
        except SimError:
            if not supersede(st, site):
                raise
            nbytes = tracker.take(reg.value, free * dt.itemsize, shp, dt)
    arr = np.empty(shp, dtypes.storage_dtype(dt))
    state = np.zeros(shp, np.uint8) if reg is MemoryRegion.psum else None
    if state is not None and fill is not None and fill is not OVERWRITTEN:
        state.fill(PSUM_OTHER)
    h = new_allocation(arr, reg, tracker, nbytes, state, st.launch.serial)
    if fill is not OVERWRITTEN:  # written on first observation (storage.fill_pending)
        h.alloc.unfilled = (np.nan if dtypes.is_float(dt) else 4) if fill is None else fill
    t = NkiTensor(h, dt, reg, name)
    if tracker is not None:
        st.sites[site] = (st.loop_epoch, weakref.ref(t))
        if st.cost is not None:  # the cost model's allocator (nkibot/sim/cost/liveness.py)
            st.cost.allocated(handle(t).alloc, site, nbytes, reg is MemoryRegion.psum,
                              shp[0], name)
    if reg is MemoryRegion.shared_hbm:
        st.shared.append(t)  # the other logical cores' same allocation reuses it
        st.shared_cursor += 1
    return t


_SIM_DIR = str(Path(__file__).resolve().parent)


def _site() -> tuple[str, int]:
    """The kernel source line that asked for this allocation (first frame outside sim)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_SIM_DIR):
        f = f.f_back  # type: ignore[assignment]
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)


def supersede(st: Any, site: tuple[str, int]) -> bool:
    """On overflow: release the tile this line allocated in an earlier `nl` loop iteration.

    NKI scopes a tile declared in a loop body to one iteration, so the previous
    iteration's tile from the same line is dead even while the Python name still holds
    it (rebinding happens only after the new allocation). A tile kept in a container
    (a list of tiles across iterations) or made in the same iteration stays live. Only
    called when an allocation would not fit, so the referrer scan is rare.
    """
    prev = st.sites.get(site)
    if prev is None or prev[0] == st.loop_epoch:
        return False
    old_t = prev[1]()
    if old_t is None or any(isinstance(r, list | tuple | dict | set)
                            for r in gc.get_referrers(old_t)):
        return False
    old = handle(old_t).alloc
    if old.tracker is None:
        return False
    old.tracker.give(old.region.value, old.nbytes)
    old.tracker = None
    return True


def _shared_reuse(shared: list[Any], st: Any, shp: tuple[int, ...],
                  dt: np.dtype[Any]) -> NkiTensor:
    # Every logical core allocates the same shared_hbm outputs; they are one tensor: the
    # i-th shared_hbm allocation of each core is the one the first core to get there made.
    i = st.shared_cursor
    st.shared_cursor += 1
    if i < len(shared) and shared[i].shape == shp and shared[i].dtype == dt:
        found: NkiTensor = shared[i]
        return found
    raise fail("lnc-sync", f"logical core {st.program} allocates shared_hbm tensor #{i + 1} "
                           f"as {list(shp)} {dtypes.name(dt)}, but another core allocated it "
                           f"as {shared[i].describe()}; every core must allocate the same "
                           "shared_hbm tensors in the same order")


def wrap(arr: np.ndarray[Any, Any], buffer: MemoryRegion, name: str = "") -> NkiTensor:
    """An HBM tensor over a caller's array (writes land in the caller's array)."""
    dt = arr.dtype
    return NkiTensor(new_allocation(arr, buffer), dt, buffer, name)
