"""`nki.language` allocation, data movement, loops, program ids and constants."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from nkibot.sim import dtypes, targets
from nkibot.sim.alloc import OVERWRITTEN, allocate
from nkibot.sim.engines import count, dma, in_buffer, on_chip, settled, tensor, write
from nkibot.sim.errors import fail
from nkibot.sim.state import current
from nkibot.sim.storage import MemoryRegion
from nkibot.sim.tensor import DynSlice, NkiTensor

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
private_hbm = MemoryRegion.private_hbm
hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm
_HBM = (MemoryRegion.private_hbm, MemoryRegion.shared_hbm)


class _TileSize:
    """Tile limits; the SBUF sizes follow the current launch's generation (targets.py)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    psum_num_banks = 8

    @property
    def sbuf_fmax_bytes(self) -> int:
        value: int = targets.rule("sbuf_partition_bytes", current().target)
        return value

    @property
    def sbuf_fmax(self) -> int:
        return self.sbuf_fmax_bytes // 4

    @property
    def sbuf_size_bytes(self) -> int:
        return 128 * self.sbuf_fmax_bytes

    @property
    def total_available_sbuf_size(self) -> int:
        return self.sbuf_fmax_bytes


tile_size = _TileSize()


def is_hbm(buffer: Any) -> bool:
    return buffer in _HBM


def is_on_chip(buffer: Any) -> bool:
    return buffer in (sbuf, psum)


def is_psum(buffer: Any) -> bool:
    return buffer is psum


def is_sbuf(buffer: Any) -> bool:
    return buffer is sbuf


def ndarray(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "",
            address: Any = None) -> NkiTensor:
    return allocate(shape, dtype, buffer, name)


def zeros(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    return full(shape, 1, dtype, buffer, name)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = sbuf,
         name: str = "") -> NkiTensor:
    t = allocate(shape, dtype, buffer, name, fill=fill_value)
    if t.on_chip:
        count("vector", t.size)
    return t


def zeros_like(x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return zeros(x.shape, x.dtype if dtype is None else dtype,
                 x.buffer if buffer is None else buffer, name)


def empty_like(x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return ndarray(x.shape, x.dtype if dtype is None else dtype,
                   x.buffer if buffer is None else buffer, name)


def shared_constant(constant: Any) -> NkiTensor:
    arr = np.load(constant) if isinstance(constant, str) else np.asarray(constant)
    t = allocate(arr.shape, arr.dtype, shared_hbm)
    write(t, arr, "shared_constant")
    return t


def shared_identity_matrix(n: int, dtype: Any = dtypes.uint8, dst: Any = None) -> NkiTensor:
    t = allocate((n, n), dtype, sbuf) if dst is None else on_chip(dst, "identity", "dst")
    write(t, np.eye(n, dtype=np.float32), "shared_identity_matrix")
    return t


def load(src: NkiTensor, dtype: Any = None) -> NkiTensor:
    """HBM -> a new SBUF tile of the same shape (DMA, casting through fp32)."""
    src = tensor(src, "load", "src")
    in_buffer(src, "load", "src", *_HBM)
    dst = allocate(src.shape, src.dtype if dtype is None else dtype, sbuf, fill=OVERWRITTEN)
    dma(dst, src)
    return dst


def load_transpose2d(src: NkiTensor, dtype: Any = None) -> NkiTensor:
    src = tensor(src, "load_transpose2d", "src")
    in_buffer(src, "load_transpose2d", "src", *_HBM)
    dst = allocate(src.shape[::-1], src.dtype if dtype is None else dtype, sbuf)
    dma(dst, src.permute(tuple(range(src.ndim))[::-1]))
    return dst


def store(dst: NkiTensor, value: NkiTensor) -> NkiTensor:
    """An on-chip tile -> HBM (shapes must match)."""
    dst = tensor(dst, "store", "dst")
    in_buffer(dst, "store", "dst", *_HBM)
    value = on_chip(value, "store", "value", allow_psum=False)  # DMA never reads PSUM
    if value.shape != dst.shape and value.size != dst.size:
        raise fail("shape-mismatch", f"store: value {value.describe()} does not match dst "
                                     f"{dst.describe()}")
    dma(dst, value)
    return dst


def ds(start: int, size: int) -> DynSlice:
    return DynSlice(start, size)


class _Loop:
    """An `nl` loop: a range whose every iteration starts a new tile scope.

    A tile declared in a loop body lives for one iteration (the compiler recycles it);
    the epoch lets the allocator release the previous iteration's tile from that line.
    """

    __slots__ = ("affine", "r")

    def __init__(self, r: range, affine: bool = False) -> None:
        self.r = r
        self.affine = affine

    def __len__(self) -> int:
        return len(self.r)

    def __iter__(self) -> Iterator[int]:
        st = current()
        cost = st.cost if self.affine else None
        if cost is None:
            for i in self.r:
                st.loop_epoch += 1
                yield i
            return
        # The cost model sees affine loops: the legacy compiler vectorised them.
        cost.loop_enter(len(self.r))
        try:
            for i in self.r:
                st.loop_epoch += 1
                cost.loop_next()
                yield i
        finally:
            cost.loop_exit()


def _range(start: int, stop: int | None, step: int, affine: bool = False) -> _Loop:
    return _Loop(range(start) if stop is None else range(start, stop, step), affine)


def affine_range(start: int, stop: int | None = None, step: int = 1) -> _Loop:
    return _range(start, stop, step, affine=True)


def sequential_range(start: int, stop: int | None = None, step: int = 1) -> _Loop:
    return _range(start, stop, step)


static_range = sequential_range


def dynamic_range(start: int, stop: int | None = None, step: int = 1) -> _Loop:
    """A loop with runtime (register) bounds; eagerly, the registers' values now."""
    refuse_in_no_reorder("nl.dynamic_range")
    return _range(start, stop, step)


def refuse_in_no_reorder(what: str) -> None:
    """Dynamic loops are not supported inside `nl.no_reorder()` (documented error)."""
    if current().no_reorder:
        raise fail("loop-illegal", f"{what} inside nl.no_reorder(): dynamic loops are not "
                                   "supported in a no_reorder block "
                                   "(nki/deep-dives/nki-dynamic-loops.rst:135-136, "
                                   "nki/api/nki/language/__init__.py:2251-2252)")


def program_id(axis: int = 0) -> int:
    """This program's index along `axis` of the launch grid (0 with no grid)."""
    st = current()
    if not st.grid:
        return 0
    _grid_axis(st.grid, axis)
    return int(np.unravel_index(st.program, st.grid)[axis])


def num_programs(axes: Any = 0) -> int:
    """Programs along `axes` (an axis or a tuple of them; None: the whole grid)."""
    grid = current().grid
    if axes is None:
        return int(np.prod(grid)) if grid else 1
    if not grid:
        return 1
    picked = (axes,) if isinstance(axes, int) else tuple(axes)
    for a in picked:
        _grid_axis(grid, a)
    return int(np.prod([grid[a] for a in picked]))


def program_ndim() -> int:
    """Axes of the launch grid; 0 when launched without one."""
    return len(current().grid)


def _grid_axis(grid: tuple[int, ...], axis: int) -> None:
    if not isinstance(axis, int) or not 0 <= axis < len(grid):
        raise fail("out-of-bounds", f"launch grid axis {axis!r}: the grid {list(grid)} has "
                                    f"{len(grid)} axis(es)")


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    # Program order is the simulator's order anyway; the depth refuses dynamic loops.
    st = current()
    st.no_reorder += 1
    try:
        yield
    finally:
        st.no_reorder -= 1


def device_print(print_prefix: str, tensor: NkiTensor) -> None:
    if isinstance(tensor, NkiTensor):
        print(print_prefix, settled(tensor))
    else:
        print(print_prefix, tensor)
