"""`nki.language` control flow on registers, random numbers and gathers.

fori_loop / while_loop run their body eagerly with the register's current value;
rand / random_seed / dropout go through the Vector engine's PRNG (isa/rng.py), so they
are deterministic for a given seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.alloc import allocate
from nkibot.sim.engines import count, free_size, on_chip, read, read_native, write
from nkibot.sim.errors import fail
from nkibot.sim.isa.registers import VirtualRegister
from nkibot.sim.isa.rng import dropout as _dropout
from nkibot.sim.isa.rng import set_rng_seed as _set_rng_seed
from nkibot.sim.isa.rng import uniform as _uniform
from nkibot.sim.language.core import refuse_in_no_reorder
from nkibot.sim.language.math import make_binary
from nkibot.sim.tensor import MemoryRegion, NkiTensor

#: A while_loop that has not ended after this many iterations is taken for a hang.
MAX_WHILE_ITERATIONS = 1_000_000


def _int(v: Any, what: str) -> int:
    if isinstance(v, VirtualRegister):
        return v.register_value()
    if isinstance(v, int | np.integer):
        return int(v)
    raise fail("unsupported", f"{what} must be an int or a register, got {v!r}")


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any], Any], step: int = 1) -> None:
    """for i in range(lower, upper, step): body_fun(i), i passed as a register by value."""
    refuse_in_no_reorder("nl.fori_loop")
    if not isinstance(step, int) or step < 1:
        raise fail("unsupported", f"fori_loop: step {step!r} must be a positive int constant")
    for i in range(_int(lower, "fori_loop lower"), _int(upper, "fori_loop upper"), step):
        body_fun(VirtualRegister(i))


def while_loop(init: Any, body_fun: Callable[[Any], Any]) -> None:
    """r = init; while r != 0: r = body_fun(r) (a register passed by value)."""
    refuse_in_no_reorder("nl.while_loop")
    if not isinstance(init, VirtualRegister):
        raise fail("unsupported", "while_loop: init must be a register (nisa.register_alloc)")
    reg = VirtualRegister(init.register_value())
    for _ in range(MAX_WHILE_ITERATIONS):
        if reg.register_value() == 0:
            return
        nxt = body_fun(VirtualRegister(reg.register_value()))
        if not isinstance(nxt, VirtualRegister):
            raise fail("unsupported", "while_loop: the body must return the condition register")
        reg = nxt
    raise fail("unsupported", f"while_loop ran {MAX_WHILE_ITERATIONS} iterations; its "
                              "condition register never reached 0")


def random_seed(seed: NkiTensor) -> None:
    _set_rng_seed(seed)


def rand(shape: Any, dtype: Any, buffer: Any = MemoryRegion.sbuf, name: str = "") -> NkiTensor:
    """A new tensor of uniform values in [0, 1)."""
    t = allocate(shape, dtype, buffer, name)
    value = _uniform("vector", t.shape)
    if not dtypes.is_float(t.dtype):
        raise fail("dtype-illegal", f"rand: dtype {dtypes.name(t.dtype)} must be a float type")
    write(t, value, "rand")
    count("vector", t.size)
    return t


def dropout(x: NkiTensor, rate: Any, dtype: Any = None) -> NkiTensor:
    """A new tile: x with each element zeroed with probability `rate`."""
    x = on_chip(x, "dropout", "x")
    out = allocate(x.shape, x.dtype, MemoryRegion.sbuf)
    _dropout(out, x, rate)
    if dtype is None or dtypes.normalize(dtype) == x.dtype:
        return out
    cast = allocate(x.shape, dtype, MemoryRegion.sbuf)
    write(cast, read(out), "dropout")
    return cast


def gather_flattened(data: NkiTensor, indices: NkiTensor, axis: int = 0,
                     dtype: Any = None) -> NkiTensor:
    """out[p, j] = flat(data[p])[indices[p, j]]: a per-partition gather (GpSimd)."""
    data, indices = on_chip(data, "gather_flattened", "data"), on_chip(
        indices, "gather_flattened", "indices")
    if axis != 0:
        raise fail("unsupported", "gather_flattened: axis must be 0 (the free dims flattened)")
    if data.shape[0] != indices.shape[0] or dtypes.is_float(indices.dtype):
        raise fail("shape-mismatch", f"gather_flattened: indices {indices.describe()} must be "
                                     f"integers with data {data.describe()}'s partitions")
    n = free_size(data)
    idx = read_native(indices).reshape(indices.shape[0], -1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise fail("out-of-bounds", f"gather_flattened: indices must lie in [0, {n})")
    x = read_native(data).reshape(data.shape[0], n)
    out = allocate(indices.shape, data.dtype if dtype is None else dtype, MemoryRegion.sbuf)
    write(out, np.take_along_axis(x, idx, axis=1).reshape(indices.shape), "gather_flattened")
    count("gpsimd", out.size)
    return out


average = make_binary("average")
prelu = make_binary("prelu")
