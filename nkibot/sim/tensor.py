"""`NkiTensor`: a shape, dtype and buffer over a storage handle (see storage.py).

Views (slices, `nl.ds`, `reshape`, `permute`, `ap`, `broadcast_to`) share storage and
are bounds-checked here, because NumPy silently truncates out-of-range slices. Writes
through `t[...] = v` are Vector-engine copies (engines.assign).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.engines import assign
from nkibot.sim.errors import fail
from nkibot.sim.indirect import (
    IndirectHandle,
    dynamic_ap,
    indirect,
    rearrange_plan,
    scalar_value,
    vector_select,
    view_offset,
)
from nkibot.sim.opaque import numpy_refused, ufunc_name, values_refused
from nkibot.sim.state import LOCAL
from nkibot.sim.storage import ON_CHIP, PMAX, Handle, MemoryRegion, Stored, handle, values
from nkibot.sim.views import access_pattern, check_partition_step

__all__ = ["PMAX", "DynSlice", "MemoryRegion", "NkiTensor"]

class DynSlice:
    """`nl.ds(start, size)`: `size` elements from `start`."""

    __slots__ = ("size", "start", "step")

    def __init__(self, start: int, size: int, step: int = 1) -> None:
        self.start, self.size, self.step = start, size, step

    def as_slice(self) -> slice:
        return slice(self.start, self.start + self.size * self.step, self.step)


class NkiTensor(Stored):
    """A tensor (HBM) or tile (SBUF/PSUM): shape, dtype and buffer over a storage handle."""

    __slots__ = ()

    # ---- description ----------------------------------------------------------------
    @property
    def strides(self) -> tuple[int, ...]:
        arr = handle(self).arr
        return tuple(s // arr.itemsize for s in arr.strides)

    def __repr__(self) -> str:
        return f"NkiTensor({self.describe()})"

    def __len__(self) -> int:
        return self.shape[0]

    # ---- the host boundary (opaque.py): no values for host code ----------------------
    def __bool__(self) -> bool:
        if LOCAL.depth == 0:
            # Host code outside any kernel launch: the API docs' examples test results
            # with `assert nl.equal(a, expected)` (all elements true). In a kernel, no.
            return bool(np.all(values(self)))
        raise values_refused("bool", self.describe())

    def __int__(self) -> int:
        raise values_refused("int", self.describe())

    def __float__(self) -> float:
        raise values_refused("float", self.describe())

    def __complex__(self) -> complex:
        raise values_refused("complex", self.describe())

    def __index__(self) -> int:
        raise values_refused("index", self.describe())

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise numpy_refused("NumPy conversion", "asarray", self.describe())

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        raise numpy_refused("NumPy ufunc", ufunc_name(ufunc), self.describe())

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise numpy_refused("NumPy function", ufunc_name(func), self.describe())

    def _derive(self, arr: np.ndarray[Any, Any], state: np.ndarray[Any, Any] | None,
                readonly: bool = False, dtype: np.dtype[Any] | None = None) -> NkiTensor:
        h = handle(self)
        return NkiTensor(Handle(arr, h.alloc, state, readonly or h.readonly),
                         self.dtype if dtype is None else dtype, self.buffer, self.name)

    # ---- indexing -------------------------------------------------------------------
    def __getitem__(self, key: Any) -> NkiTensor:
        np_key = self._np_key(key)
        h = handle(self)
        arr = h.arr[np_key]
        state = None if h.state is None else h.state[np_key]
        if self.on_chip and arr.ndim < 2:
            arr = arr.reshape(arr.shape + (1,) * (2 - arr.ndim))
            state = None if state is None else state.reshape(arr.shape)
        return self._derive(arr, state)

    def __setitem__(self, key: Any, value: Any) -> None:
        assign(self[key], value)

    def _np_key(self, key: Any) -> tuple[Any, ...]:
        keys = key if isinstance(key, tuple) else (key,)
        shape = self.shape
        explicit = len(keys)
        for k in keys:
            if k is Ellipsis:
                explicit -= 1
        if explicit > len(shape):
            raise fail("out-of-bounds", f"{explicit} indices into {self.describe()}")
        on_chip = self.buffer in ON_CHIP
        out: list[Any] = []
        for k in keys:
            if k is Ellipsis:
                for _ in range(len(shape) - explicit):
                    out.append(self._dim_key(len(out), slice(None), on_chip))
            else:
                out.append(self._dim_key(len(out), k, on_chip))
        while len(out) < len(shape):
            out.append(self._dim_key(len(out), slice(None), on_chip))
        return tuple(out)

    def _dim_key(self, dim: int, k: Any, on_chip: bool) -> Any:
        size = self.shape[dim]
        if isinstance(k, DynSlice):
            k = k.as_slice()
        if isinstance(k, slice):
            step = 1 if k.step is None else operator.index(k.step)
            start = 0 if k.start is None else operator.index(k.start)
            stop = size if k.stop is None else operator.index(k.stop)
            if start < 0:
                start += size
            if stop < 0:
                stop += size
            if step < 1 or not 0 <= start < stop <= size:
                raise fail("out-of-bounds", f"slice {start}:{stop}:{step} on dim {dim} of size "
                                            f"{size} of {self.describe()}")
            return slice(start, stop, step)
        if isinstance(k, NkiTensor):
            raise fail("unsupported", "dynamic (tensor) indices are not supported; use .ap()")
        try:
            i = operator.index(k)
        except TypeError:
            raise fail("out-of-bounds", f"index {k!r} on dim {dim} is not an int") from None
        i = i + size if i < 0 else i
        if not 0 <= i < size:
            raise fail("out-of-bounds",
                       f"index {i} on dim {dim} of size {size} of {self.describe()}")
        return slice(i, i + 1) if dim == 0 and on_chip else i

    # ---- views ----------------------------------------------------------------------
    def reshape(self, *shape: Any) -> NkiTensor:
        new = tuple(operator.index(s) for s in
                    (shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape))
        if self.on_chip and new[0] != self.shape[0]:
            raise fail("view-illegal", f"reshape {self.describe()} to {list(new)} changes the "
                                       "partition dim")
        h = handle(self)
        try:
            arr = np.reshape(h.arr, new, copy=False)
        except ValueError as exc:
            raise fail("view-illegal",
                       f"cannot reshape {self.describe()} to {list(new)}: {exc}") from None
        state = None if h.state is None else np.reshape(h.state, new, copy=False)
        return self._derive(arr, state)

    def permute(self, dims: Any) -> NkiTensor:
        order = tuple(operator.index(d) for d in dims)
        if sorted(order) != list(range(self.ndim)) or (self.on_chip and order[0] != 0):
            raise fail("view-illegal", f"permute {order} of {self.describe()}")
        h = handle(self)
        state = None if h.state is None else h.state.transpose(order)
        return self._derive(h.arr.transpose(order), state)

    def broadcast_to(self, shape: Any) -> NkiTensor:
        new = tuple(operator.index(s) for s in shape)
        if len(new) != self.ndim or any(a not in (1, b) for a, b in zip(self.shape, new,
                                                                          strict=True)):
            raise fail("broadcast", f"cannot broadcast {self.describe()} to {list(new)}")
        if self.on_chip and new[0] > PMAX:
            raise fail("partition-dim", f"broadcast to {list(new)}: partition dim over 128")
        h = handle(self)
        state = None if h.state is None else np.broadcast_to(h.state, new)
        return self._derive(np.broadcast_to(h.arr, new), state, readonly=True)

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        if self.on_chip and dim == 0:
            raise fail("view-illegal", "broadcast along the partition dim of an on-chip tensor")
        return self.broadcast_to(tuple(size if d == dim else s for d, s in enumerate(self.shape)))

    def expand_dim(self, dim: int) -> NkiTensor:
        if self.on_chip and dim == 0:
            raise fail("view-illegal", "expand_dim(0) on an on-chip tensor")
        return self.reshape((*self.shape[:dim], 1, *self.shape[dim:]))

    def squeeze_dim(self, dim: int) -> NkiTensor:
        if self.shape[dim] != 1 or (self.on_chip and dim == 0):
            raise fail("view-illegal", f"squeeze_dim({dim}) of {self.describe()}")
        return self.reshape(self.shape[:dim] + self.shape[dim + 1:])

    def reshape_dim(self, dim: int, shape: Any) -> NkiTensor:
        parts = list(shape)
        if -1 in parts:
            known = int(np.prod([p for p in parts if p != -1]))
            parts[parts.index(-1)] = self.shape[dim] // known
        return self.reshape(self.shape[:dim] + tuple(parts) + self.shape[dim + 1:])

    def flatten_dims(self, start_dim: int, end_dim: int) -> NkiTensor:
        merged = int(np.prod(self.shape[start_dim:end_dim + 1]))
        return self.reshape((*self.shape[:start_dim], merged, *self.shape[end_dim + 1:]))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim: int, index: Any) -> NkiTensor:
        if not isinstance(index, int):  # a runtime index (a tensor or register)
            if self.on_chip and dim == 0:
                raise fail("view-illegal", "dynamic select on the partition dim of an "
                                           "on-chip tensor")
            index = scalar_value(index, "select")
        key: list[Any] = [slice(None)] * self.ndim
        key[dim] = index
        return self[tuple(key)]

    def view(self, dtype: Any) -> NkiTensor:
        dt = dtypes.normalize(dtype)
        if handle(self).arr.dtype.itemsize != self.dtype.itemsize:
            raise fail("unsupported", f"view {self.describe()} as {dtypes.name(dt)}: with "
                                      "NKI_PRECISE_FP=0 its values are stored as float32 "
                                      "(nki/guides/nki_simulator.rst:135), so it has no "
                                      f"{dtypes.name(self.dtype)} bits to reinterpret")
        try:
            arr = handle(self).arr.view(dt)
        except ValueError as exc:
            raise fail("view-illegal", f"view {self.describe()} as {dt}: {exc}") from None
        return self._derive(arr, None, dtype=dt)

    reinterpret_cast = view

    def ap(self, pattern: Any, offset: int | None = None, scalar_offset: Any = None,
           vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> NkiTensor:
        if _is_pair(pattern) and _is_pair(offset):
            # `t.ap([32, 16], [1, 32])`: the pairs passed one by one, as the access-pattern
            # deep-dive writes it (nki/deep-dives/nki-aps.rst:158-159); no offset.
            pattern, offset = [pattern, offset], None
        dt = self.dtype if dtype is None else dtypes.normalize(dtype)
        if scalar_offset is not None or vector_offset is not None:
            h = dynamic_ap(self, pattern, offset, scalar_offset, vector_offset, indirect_dim, dt)
            return NkiTensor(h, dt, self.buffer, self.name)
        if self.on_chip:
            check_partition_step(handle(self), pattern, dt, self.describe())
        arr, state = access_pattern(handle(self), self.on_chip, self.describe(), pattern,
                                    offset, dt)
        return self._derive(arr, state, dtype=dt)

    # ---- access patterns (nki/deep-dives/nki-aps.rst) -----------------------------
    @property
    def offset(self) -> int:
        """Element offset of this view from the start of its storage."""
        return view_offset(self)

    def get_pattern(self) -> list[list[int]]:
        """The view as `[[stride, count], ...]`, one pair per dimension."""
        return [[int(s), int(n)] for s, n in zip(self.strides, self.shape, strict=True)]

    def is_contiguous(self) -> bool:
        return bool(handle(self).arr.flags.c_contiguous)

    def is_indirect(self) -> bool:
        return isinstance(handle(self), IndirectHandle)

    def rearrange(self, src_pattern: Any, dst_pattern: Any,
                  fixed_sizes: dict[str, int] | None = None) -> NkiTensor:
        """einops-style split / reorder / merge, as views."""
        split, order, merged = rearrange_plan(self.shape, src_pattern, dst_pattern, fixed_sizes)
        out = self.reshape(split).permute(order)
        return out if merged == out.shape else out.reshape(merged)

    def vector_select(self, dim: int, vector_offset: Any) -> NkiTensor:
        """Partition p of the result reads index vector_offset[p] of dim 0 (a gather)."""
        return NkiTensor(vector_select(self, dim, vector_offset), self.dtype, self.buffer,
                         self.name)

    def indirect(self, index: Any, num_elem: int | None = None) -> NkiTensor:
        """Tensor indirection (Trn3): columns at the offsets held in `index`."""
        return NkiTensor(indirect(self, index, num_elem), self.dtype, self.buffer, self.name)


def _is_pair(v: Any) -> bool:
    """`[step, count]`: one access-pattern pair of ints."""
    return isinstance(v, list | tuple) and len(v) == 2 and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v)
