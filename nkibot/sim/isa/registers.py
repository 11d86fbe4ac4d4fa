"""Virtual registers (register_alloc/move/load/store) and the LNC synchronisation
instructions (core_barrier, sendrecv).

Registers hold a 32-bit integer; the simulator runs eagerly, so a register is just a
Python int that `nl.fori_loop`, `nl.while_loop`, `nl.dynamic_range` and
`.ap(scalar_offset=)` read when they run.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.engines import count, read_native, require, tensor, write
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import dma_engine as _dma_engine
from nkibot.sim.isa.enums import engine as _engine
from nkibot.sim.language.objects import NKIObject
from nkibot.sim.state import current
from nkibot.sim.tensor import NkiTensor


class VirtualRegister(NKIObject):
    """A 32-bit scalar register of an engine sequencer."""

    def __init__(self, value: int | None = None) -> None:
        self.value = value

    def register_value(self) -> int:
        if self.value is None:
            raise fail("unsupported", "reading a register that was never written "
                                      "(register_alloc() without a value)")
        return self.value

    def __index__(self) -> int:
        return self.register_value()

    __int__ = __index__

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value})"


def _int32(v: int) -> int:
    return int(np.array(v & 0xFFFFFFFF, np.uint32).view(np.int32))


def register_alloc(x: int | None = None) -> VirtualRegister:
    return VirtualRegister(None if x is None else _int32(operator.index(x)))


def _register(r: Any, what: str) -> VirtualRegister:
    if not isinstance(r, VirtualRegister):
        raise fail("unsupported", f"{what} must be a register from nisa.register_alloc")
    return r


def register_move(dst: Any, src: Any) -> None:
    reg = _register(dst, "register_move dst")
    reg.value = src.register_value() if isinstance(src, VirtualRegister) else \
        _int32(operator.index(src))


def register_load(dst: Any, src: NkiTensor) -> None:
    reg = _register(dst, "register_load dst")
    t = tensor(src, "register_load", "src")
    if t.size != 1 or t.dtype.itemsize > 4:
        raise fail("shape-mismatch", f"register_load: src {t.describe()} must hold one "
                                     "scalar of at most 32 bits")
    value = np.asarray(read_native(t)).reshape(-1)[0]
    reg.value = _int32(int(value))
    count("dma" if not t.on_chip else "vector", 1)


def register_store(dst: NkiTensor, src: Any) -> None:
    reg = _register(src, "register_store src")
    t = tensor(dst, "register_store", "dst")
    if t.size != 1:
        raise fail("shape-mismatch", f"register_store: dst {t.describe()} must hold one element")
    write(t, np.array(reg.register_value(), np.int64) if not dtypes.is_float(t.dtype)
          else np.float32(reg.register_value()), "register_store")
    count("dma" if not t.on_chip else "vector", 1)


_SERIAL = ("the simulator runs the logical cores of an LNC launch one after another, so "
           "cross-core synchronisation cannot be honoured")


def core_barrier(data: NkiTensor, cores: Any, engine: Any = _engine.gpsimd,
                 name: Any = None) -> None:
    require("core_barrier")
    if tuple(cores) != (0, 1):
        raise fail("unsupported", "core_barrier: only cores=(0, 1) is supported (as in NKI)")
    if current().lnc == 1:
        return  # one core: nothing to wait for
    raise fail("unsupported", f"core_barrier: {_SERIAL}")


def sendrecv(src: Any, dst: Any, send_to_rank: Any, recv_from_rank: Any, pipe_id: Any,
             dma_engine: Any = _dma_engine.dma, name: Any = None) -> None:
    require("sendrecv")
    raise fail("unsupported", f"sendrecv: {_SERIAL}")
