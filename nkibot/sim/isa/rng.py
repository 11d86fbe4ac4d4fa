"""Random numbers: rng, rand2, dropout, set_rng_seed, rand_set_state / rand_get_state.

Deterministic for a given seed: each engine keeps a per-lane uint32 state (24 words on
Vector, 6 on GpSimd, the XORWOW sizes the docs give); a draw is a function of that state
only, and advances it. So `rand_get_state` then `rand_set_state` replays the stream, and
the same seed gives the same numbers, as on hardware (the bits themselves differ).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.engines import (
    count,
    free_size,
    on_chip,
    read,
    read_native,
    require,
    scalar_operand,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import engine as _engine
from nkibot.sim.state import current
from nkibot.sim.tensor import MemoryRegion, NkiTensor

Arr = np.ndarray[Any, Any]
WORDS = {"vector": 24, "gpsimd": 6}
_INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32)


def _state(eng: str) -> Arr:
    regs = current().regs
    key = f"rng:{eng}"
    if key not in regs:
        regs[key] = seeded(eng, 0)
    return regs[key]


def seeded(eng: str, seed: int) -> Arr:
    lanes = np.arange(128, dtype=np.uint64)[:, None] * np.uint64(WORDS[eng])
    words = np.arange(WORDS[eng], dtype=np.uint64)[None, :]
    mixed = _mix(np.uint64(int(seed) & 0xFFFFFFFF) * _GOLDEN + lanes + words)
    return (mixed >> np.uint64(32)).astype(np.uint32)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: Arr) -> Arr:
    """splitmix64's finaliser: a bijective 64-bit mix (counter-based generation)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out: Arr = z ^ (z >> np.uint64(31))
        return out


def draw_bits(eng: str, shape: tuple[int, ...]) -> Arr:
    """32 random bits per element of `shape`; lane p (partition p) uses and advances only
    its own state words, so saving and restoring a lane's state replays its stream."""
    st = _state(eng)
    lanes = shape[0]
    with np.errstate(over="ignore"):
        key = np.zeros(lanes, np.uint64)
        for w in range(st.shape[1]):
            key = _mix(key * _GOLDEN + st[:lanes, w].astype(np.uint64))
        n = int(np.prod(shape[1:], dtype=np.int64))
        ctr = np.arange(n, dtype=np.uint64)[None, :] * _GOLDEN
        bits = (_mix(key[:, None] + ctr) >> np.uint64(32)).astype(np.uint32)
        step = _mix(key[:, None] + np.uint64(n) * _GOLDEN + np.arange(
            st.shape[1], dtype=np.uint64)[None, :] + np.uint64(1))
    st[:lanes] = (step >> np.uint64(32)).astype(np.uint32)
    return bits.reshape(shape)


def uniform(eng: str, shape: tuple[int, ...]) -> Arr:
    """Uniform fp32 in [0, 1) from 24 random bits per element."""
    u: Arr = (draw_bits(eng, shape) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return u


def _engine_name(engine: Any, op: str, dst: NkiTensor | None) -> str:
    eng = "vector" if engine in (None, _engine.unknown) else engine.value
    if eng not in WORDS:
        raise fail("unsupported", f"{op}: engine {eng} has no PRNG; use vector or gpsimd")
    if eng == "gpsimd" and dst is not None and dst.buffer is MemoryRegion.psum:
        raise fail("buffer-illegal", f"{op}: the GpSimd engine cannot access PSUM")
    return eng


def rng(dst: NkiTensor, engine: Any = _engine.vector, name: Any = None) -> None:
    """32 random bits per element, truncated to dst's integer type (low bits kept)."""
    dst = on_chip(dst, "rng", "dst")
    if dst.dtype not in _INTS:
        raise fail("dtype-illegal", f"rng: dst {dst.describe()} must be an integer type")
    eng = _engine_name(engine, "rng", dst)
    # "Supported engines: NeuronCore-v2: Vector. NeuronCore-v3+: GpSimd, Vector."
    if eng == "gpsimd" and current().target == "trn1":
        raise fail("arch-unsupported", "rng on GpSimd needs NeuronCore-v3+ (Trn2+)")
    bits = draw_bits(eng, dst.shape)
    width = dst.dtype.itemsize * 8
    low = bits & np.uint32((1 << width) - 1) if width < 32 else bits
    write(dst, low.astype(np.uint32).view(np.int32) if dst.dtype == dtypes.int32 else low,
          "rng")
    count(eng, dst.size)


def rand2(dst: NkiTensor, min: Any, max: Any, name: Any = None) -> None:
    """Uniform values in [min, max] (Vector, NeuronCore-v4+)."""
    require("rand2")
    dst = on_chip(dst, "rand2", "dst")
    lo = scalar_operand(min, dst, "rand2", "min")
    hi = scalar_operand(max, dst, "rand2", "max")
    if np.any(np.asarray(lo) >= np.asarray(hi)):
        raise fail("shape-mismatch", "rand2: min must be below max")
    write(dst, lo + uniform("vector", dst.shape) * (hi - lo), "rand2")
    count("vector", dst.size)


def dropout(dst: NkiTensor, data: NkiTensor, prob: Any, name: Any = None) -> None:
    """Zero each element with probability prob (a scalar or [P,1] tile); no rescaling."""
    dst, data = on_chip(dst, "dropout", "dst"), on_chip(data, "dropout", "data")
    if dst.dtype != data.dtype:
        raise fail("dtype-illegal", f"dropout: dst {dst.describe()} must match data "
                                    f"{data.describe()}'s dtype")
    if free_size(dst) != free_size(data) or dst.shape[0] != data.shape[0]:
        raise fail("shape-mismatch", f"dropout: dst {dst.describe()} and data "
                                     f"{data.describe()} differ in shape")
    if isinstance(prob, NkiTensor) and not dtypes.is_float(data.dtype) and \
            prob.dtype != dtypes.float32:
        raise fail("dtype-illegal", "dropout: prob must be float32 for integer data")
    p = scalar_operand(prob, data, "dropout", "prob")
    keep = uniform("vector", data.shape) >= p
    x = read_native(data)
    write(dst, np.where(keep, x, np.zeros((), x.dtype)), "dropout")
    count("vector", dst.size)


def set_rng_seed(src_seeds: NkiTensor, name: Any = None) -> None:
    """Seed the Vector engine's PRNG from a [1, 1] 32-bit value."""
    t = on_chip(src_seeds, "set_rng_seed", "src_seeds")
    if t.size != 1 or t.dtype.itemsize != 4:
        raise fail("shape-mismatch", f"set_rng_seed: src_seeds {t.describe()} must be a [1, 1] "
                                     "32-bit tensor")
    seed = int(np.asarray(read_native(t)).reshape(-1).view(np.uint32)[0]) \
        if t.dtype != dtypes.float32 else int(read(t).reshape(-1)[0])
    current().regs["rng:vector"] = seeded("vector", seed)
    count("vector", 1)


def _state_engine(engine: Any, op: str, dst: NkiTensor | None) -> str:
    require(op)
    tgt = current().target
    eng = "gpsimd" if engine in (None, _engine.unknown) else _engine_name(engine, op, dst)
    if eng == "vector" and tgt == "trn2":  # "NeuronCore-v3: GpSimd. NeuronCore-v4+: GpSimd, Vector"
        raise fail("arch-unsupported", f"{op} on the Vector engine needs NeuronCore-v4 (Trn3)")
    return eng


def rand_set_state(src_seeds: NkiTensor, engine: Any = _engine.gpsimd, name: Any = None) -> None:
    """Load each lane's PRNG state (6 uint32 on GpSimd, 24 on Vector) from SBUF."""
    t = on_chip(src_seeds, "rand_set_state", "src_seeds", allow_psum=False)
    eng = _state_engine(engine, "rand_set_state", None)
    if t.dtype != dtypes.uint32 or free_size(t) != WORDS[eng]:
        raise fail("shape-mismatch", f"rand_set_state: src_seeds {t.describe()} must be uint32 "
                                     f"with {WORDS[eng]} elements per partition on {eng}")
    st = _state(eng)
    st[:t.shape[0]] = read_native(t).reshape(t.shape[0], WORDS[eng])
    count(eng, t.size)


def rand_get_state(dst: NkiTensor, engine: Any = _engine.gpsimd, name: Any = None) -> None:
    """Store each lane's PRNG state into dst (uint32, 6 or 24 per partition)."""
    dst = on_chip(dst, "rand_get_state", "dst")
    eng = _state_engine(engine, "rand_get_state", dst)
    if dst.dtype != dtypes.uint32 or free_size(dst) != WORDS[eng]:
        raise fail("shape-mismatch", f"rand_get_state: dst {dst.describe()} must be uint32 "
                                     f"with {WORDS[eng]} elements per partition on {eng}")
    write(dst, _state(eng)[:dst.shape[0]].reshape(dst.shape), "rand_get_state")
    count(eng, dst.size)
