"""Layout ops on a kernel argument as one strided access pattern (shape, strides, offset).

A chain of views (reshape, transpose/permute, slicing, narrow, select, flip, expand) of a
contiguous HBM tensor addresses element `offset + sum(i_d * strides[d])`: exactly an NKI
access pattern (`t.ap([[stride, count], ...], offset=...)`, nki/deep-dives/nki-aps.rst).
The algebra is NumPy's own view arithmetic, run on a fake array of 1-byte elements that
has no memory behind it (`as_strided` over one byte), so composing views costs nothing
whatever the shape, and a reshape that no strided view can express is refused exactly
when NumPy would need a copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

_BYTE = np.zeros(1, np.int8)  # the fake arrays' one real byte; never read or written
_BASE = int(_BYTE.__array_interface__["data"][0])


@dataclass(frozen=True)
class Strided:
    """Element (i_0, ..., i_n) of the view is element `offset + sum(i_d * strides[d])` of
    the flat, contiguous source tensor."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def contiguous(self) -> bool:
        """True when the view is the source itself, read in order (a plain reshape)."""
        return self.offset == 0 and self.merged() == [(math.prod(self.shape), 1)]

    def merged(self) -> list[tuple[int, int]]:
        """(count, stride) per dim, size-1 dims dropped and adjacent dims merged where
        the source runs on (a contiguous destination merges any adjacent pair)."""
        dims = [(n, s) for n, s in zip(self.shape, self.strides, strict=True) if n != 1]
        out: list[tuple[int, int]] = []
        for n, s in dims:
            if out and out[-1][1] == s * n:
                out[-1] = (out[-1][0] * n, s)
            else:
                out.append((n, s))
        return out or [(1, 1)]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def source(shape: tuple[int, ...]) -> Strided:
    """A whole contiguous tensor of `shape`."""
    return Strided(tuple(shape), contiguous_strides(tuple(shape)))


def _of(arr: np.ndarray[Any, Any], offset: int) -> Strided:
    moved = int(arr.__array_interface__["data"][0]) - _BASE
    strides = tuple(int(s) if n != 1 else 0 for n, s in zip(arr.shape, arr.strides,
                                                             strict=True))
    return Strided(tuple(int(n) for n in arr.shape), strides, offset + moved)


def apply(view: Strided, op: str, shape: tuple[int, ...], **attrs: Any) -> Strided | None:
    """The view after one layout op (IR op name and attrs), or None when the result is
    not one strided pattern (a reshape across a permutation: it needs a copy first)."""
    arr = as_strided(_BYTE, shape=view.shape, strides=view.strides)
    try:
        out = _step(arr, op, shape, attrs)
    except (ValueError, IndexError):
        return None
    if out is None or tuple(out.shape) != tuple(shape):
        return None
    return _of(out, view.offset)


def _step(arr: np.ndarray[Any, Any], op: str, shape: tuple[int, ...],
          attrs: dict[str, Any]) -> np.ndarray[Any, Any] | None:
    if op in ("view", "copy"):
        return np.reshape(arr, shape, copy=False)
    if op == "transpose":  # the last two dims
        return np.swapaxes(arr, -1, -2)
    if op == "permute":
        return np.transpose(arr, tuple(attrs["perm"]))
    if op == "flip":
        dims = attrs.get("dims", (attrs.get("dim"),))
        return np.flip(arr, tuple(int(d) for d in dims))
    if op in ("slice", "narrow"):
        dim, start = int(attrs.get("dim", arr.ndim - 1)), int(attrs.get("start", 0))
        step = int(attrs.get("step", 1))
        index = [slice(None)] * arr.ndim
        index[dim] = slice(start, start + step * (shape[dim] - 1) + 1, step)
        return arr[tuple(index)]
    if op == "select":
        picked: np.ndarray[Any, Any] = np.moveaxis(arr, int(attrs["dim"]), 0)[
            int(attrs.get("index", 0))]
        return picked
    if op == "expand":
        return np.broadcast_to(arr, shape)
    if op == "subscript":
        sub: np.ndarray[Any, Any] = arr[tuple(_index(item) for item in attrs["index"])]
        return sub
    return None


def _index(item: tuple[Any, ...]) -> Any:
    kind = item[0]
    if kind == "none":
        return None
    if kind == "ellipsis":
        return Ellipsis
    if kind == "int":
        return item[1]
    return slice(*item[1:])


def numel(view: Strided) -> int:
    return math.prod(view.shape)
