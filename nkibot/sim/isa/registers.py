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
from nkibot.sim.engines import (
    count,
    free_size,
    on_chip,
    read_native,
    require,
    storage_of,
    tensor,
    write,
)
from nkibot.sim.errors import fail, user_site
from nkibot.sim.isa.enums import dma_engine as _dma_engine
from nkibot.sim.isa.enums import engine as _engine
from nkibot.sim.language.objects import NKIObject
from nkibot.sim.lnc import Message
from nkibot.sim.state import current
from nkibot.sim.storage import MemoryRegion
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

    def __bool__(self) -> bool:
        # `while reg:` loops while the register holds a non-zero integer
        # (nki/get-started/about/index.rst:227)
        return self.register_value() != 0

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


_ISA = "nki/api/nki/isa/__init__.py"
#: Per-partition byte limit of a gpsimd_dma sendrecv, by element size
#: (nki/api/nki/isa/__init__.py:3003-3007).
_GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}


def _lnc2(op: str, line: int) -> Any:
    """The launch's core scheduler; refused outside an LNC=2 launch, as the docs say."""
    st = current()
    if st.lnc < 2 or st.cores is None:
        raise fail("lnc-sync", f"{op} is only allowed when LNC (Logical NeuronCore) is "
                               f"enabled ({_ISA}:{line}): launch the kernel as kernel[2]")
    return st


def core_barrier(data: NkiTensor, cores: Any, engine: Any = _engine.gpsimd,
                 name: Any = None) -> None:
    """Wait until every logical core reached this barrier (nki/api/nki/isa/__init__.py:2601-2653).

    The running core blocks until the other core's matching (same-numbered) barrier;
    both must synchronise on the same shared_hbm tensor. Writes made before it on either
    core are visible to both after it.
    """
    require("core_barrier")
    if tuple(cores) != (0, 1):
        raise fail("unsupported", f"core_barrier: cores={tuple(cores)!r}; only cores=(0, 1) "
                                  f"is supported ({_ISA}:2620)")
    st = _lnc2("core_barrier", 2618)
    t = tensor(data, "core_barrier", "data")
    if t.buffer is not MemoryRegion.shared_hbm:
        raise fail("buffer-illegal", f"core_barrier: data is {t.describe()}; it must be data "
                                     f"in shared HBM ({_ISA}:2624)")
    count(engine.value if isinstance(engine, _engine) and engine.value in
          ("vector", "scalar", "gpsimd", "tensor") else "gpsimd", 1)
    st.cores.barrier(st.program, tuple(cores), storage_of(t).alloc, t.describe(), user_site())


def _rank(v: Any, role: str, lnc: int) -> int:
    r = v.register_value() if isinstance(v, VirtualRegister) else operator.index(v)
    if r not in (0, 1) or r >= lnc:
        raise fail("out-of-bounds", f"sendrecv: {role}={r}; it must be 0 or 1, a logical core "
                                    f"of this LNC={lnc} launch ({_ISA}:2991)")
    return r


def sendrecv(src: Any, dst: Any, send_to_rank: Any, recv_from_rank: Any, pipe_id: Any,
             dma_engine: Any = _dma_engine.dma, name: Any = None) -> None:
    """Send `src` to core `send_to_rank`'s `dst`; receive core `recv_from_rank`'s `src`
    into this core's `dst` (nki/api/nki/isa/__init__.py:2971-3046).

    The values sent are those `src` holds at the call (so `src` may be `dst`: a swap).
    This core waits until the partner's sendrecv on the same `pipe_id` has sent; a
    partner that never does (it finished, or waits elsewhere) is a deadlock (`lnc-sync`).
    """
    require("sendrecv")
    s = on_chip(src, "sendrecv", "src", allow_psum=False)
    d = on_chip(dst, "sendrecv", "dst", allow_psum=False)
    if s.dtype != d.dtype:
        raise fail("dtype-illegal", f"sendrecv: src {s.describe()} and dst {d.describe()} must "
                                    f"have the same data type ({_ISA}:3012)")
    if s.shape != d.shape:
        raise fail("shape-mismatch", f"sendrecv: src {s.describe()} and dst {d.describe()} "
                                     f"must have the same shape and layout ({_ISA}:3013)")
    if not isinstance(dma_engine, _dma_engine):
        raise fail("unsupported", f"sendrecv: dma_engine={dma_engine!r}; use "
                                  "nisa.dma_engine.dma or nisa.dma_engine.gpsimd_dma")
    if dma_engine is _dma_engine.gpsimd_dma:
        limit = _GPSIMD_DMA_BYTES.get(s.dtype.itemsize, 1024)
        per_partition = free_size(s) * s.dtype.itemsize
        if per_partition > limit:
            raise fail("shape-mismatch", f"sendrecv: {s.describe()} moves {per_partition} B per "
                                         f"partition; dma_engine=gpsimd_dma allows {limit} B "
                                         f"for {8 * s.dtype.itemsize}-bit types "
                                         f"({_ISA}:3003-3007)")
    st = _lnc2("sendrecv", 2988)
    to = _rank(send_to_rank, "send_to_rank", st.lnc)
    frm = _rank(recv_from_rank, "recv_from_rank", st.lnc)
    where = user_site()
    sent = Message(np.array(read_native(s)), s.dtype, s.shape, where)
    count("gpsimd" if dma_engine is _dma_engine.gpsimd_dma else "dma", free_size(s) * s.shape[0])
    got = st.cores.exchange(st.program, to, frm, pipe_id, sent, where)
    if got.dtype != d.dtype or got.shape != d.shape:
        raise fail("shape-mismatch" if got.dtype == d.dtype else "dtype-illegal",
                   f"sendrecv (pipe_id={pipe_id!r}): core {frm} sent "
                   f"{list(got.shape)} {dtypes.name(got.dtype)} (at {got.where}) but core "
                   f"{st.program}'s dst is {d.describe()}; src and dst must have the same "
                   f"data type and shape ({_ISA}:3012-3013)")
    write(d, got.values, "sendrecv")
