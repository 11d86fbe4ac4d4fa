"""`nki.isa` data movement and pattern instructions: dma_copy, tensor_copy, memset, iota..."""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import dtypes, ops
from nkibot.sim.engines import (
    arch_refused,
    count,
    dma,
    free_size,
    in_buffer,
    on_chip,
    read,
    read_native,
    rule,
    same_elements,
    settled,
    target,
    tensor,
    write,
)
from nkibot.sim.errors import fail
from nkibot.sim.indirect import indirection
from nkibot.sim.isa.enums import dge_mode as _dge
from nkibot.sim.isa.enums import engine as _engine
from nkibot.sim.isa.enums import oob_mode as _oob
from nkibot.sim.language.math import make_binary
from nkibot.sim.state import current
from nkibot.sim.storage import PMAX, MemoryRegion
from nkibot.sim.tensor import NkiTensor

_equal = make_binary("equal")
_DMA_OK = (MemoryRegion.sbuf, MemoryRegion.private_hbm, MemoryRegion.shared_hbm)


def dma_copy(dst: NkiTensor, src: NkiTensor, priority: Any = None,
             oob_mode: Any = _oob.error, dge_mode: Any = _dge.unknown,
             engine: Any = _engine.unknown, name: Any = None) -> None:
    """Copy HBM/SBUF -> HBM/SBUF (never PSUM), casting through fp32 when dtypes differ."""
    dst, src = tensor(dst, "dma_copy", "dst"), tensor(src, "dma_copy", "src")
    in_buffer(src, "dma_copy", "src", *_DMA_OK)
    in_buffer(dst, "dma_copy", "dst", *_DMA_OK)
    for role, t in (("dst", dst), ("src", src)):
        if t.on_chip and t.shape[0] > PMAX:
            raise fail("partition-dim", f"dma_copy: '{role}' {t.describe()} has more than "
                                        "128 partitions")
    if dst.size != src.size:
        raise fail("shape-mismatch", f"dma_copy: dst {dst.describe()} and src {src.describe()} "
                                     "hold different numbers of elements")
    if getattr(dge_mode, "name", None) == "hwdge" and not rule("dma_hwdge"):
        raise arch_refused("dma_hwdge", "dma_copy dge_mode=hwdge")
    if priority is not None and not rule("dma_priority"):
        raise arch_refused("dma_priority", f"dma_copy priority={priority!r}")
    _checked_dma(dst, src, oob_mode, "dma_copy")


def _checked_dma(dst: NkiTensor, src: NkiTensor, oob: Any, op: str) -> None:
    """A DMA whose src (gather) or dst (scatter) may be indirect; oob_mode.skip drops
    out-of-bounds indices (the destination keeps its values there)."""
    src_ind, dst_ind = indirection(src), indirection(dst)
    for ind, t in ((src_ind, src), (dst_ind, dst)):
        if ind is not None and oob is not _oob.skip:
            ind.require_valid(op, t.describe())
    if src_ind is not None and not bool(src_ind.valid.all()):
        keep = src_ind.valid.reshape(dst.shape)
        write(dst, np.where(keep, read(src).reshape(dst.shape), read(dst)), op)
        current().count("dma", dst.size)
        return
    dma(dst, src)


def tensor_copy(dst: NkiTensor, src: NkiTensor, engine: Any = _engine.unknown,
                name: Any = None) -> None:
    """On-chip copy (SBUF/PSUM), bit-exact for equal dtypes, else through fp32."""
    dst, src = on_chip(dst, "tensor_copy", "dst"), on_chip(src, "tensor_copy", "src")
    same_elements("tensor_copy", ("dst", dst), ("src", src))
    eng = "vector" if engine in (None, _engine.unknown) else engine.value
    if eng == "gpsimd" and MemoryRegion.psum in (dst.buffer, src.buffer):
        raise fail("buffer-illegal", "tensor_copy: the GpSimd engine cannot access PSUM "
                                     f"(dst {dst.describe()}, src {src.describe()})")
    # ISA:393: the Scalar engine on NeuronCore-v2 always copies through an fp32 cast.
    same = src.dtype == dst.dtype and not (eng == "scalar" and target() == "trn1")
    write(dst, read_native(src) if same else read(src), "tensor_copy")
    count(eng, dst.size)


def memset(dst: NkiTensor, value: Any, engine: Any = _engine.unknown, name: Any = None) -> None:
    dst = on_chip(dst, "memset", "dst")
    if not dtypes.is_float(dst.dtype) and isinstance(value, float):
        raise fail("dtype-illegal", f"memset: value {value!r} is a float but dst "
                                    f"{dst.describe()} is an integer type; pass an int")
    write(dst, value, "memset")
    count("vector" if engine in (None, _engine.unknown) else engine.value, dst.size)


def tensor_copy_predicated(dst: NkiTensor, src: Any, predicate: NkiTensor,
                           reverse_pred: bool = False, name: Any = None) -> None:
    op = "tensor_copy_predicated"
    dst, predicate = on_chip(dst, op, "dst"), on_chip(predicate, op, "predicate")
    same_elements(op, ("dst", dst), ("predicate", predicate))
    if predicate.dtype not in (dtypes.uint8, dtypes.uint16, dtypes.uint32):
        raise fail("dtype-illegal", f"{op}: predicate {predicate.describe()} must be uint8/16/32")
    mask = read_mask(predicate, dst) != reverse_pred
    if isinstance(src, NkiTensor):
        src = on_chip(src, op, "src")
        same_elements(op, ("dst", dst), ("src", src))
        if src.dtype != dst.dtype:
            raise fail("dtype-illegal", f"{op}: src {src.describe()} and dst {dst.describe()} "
                                        "must share a dtype")
        value = read_native(src).reshape(dst.shape)
    else:
        value = src
    write(dst, np.where(mask, value, settled(dst)), op)
    count("vector", dst.size)


def read_mask(predicate: NkiTensor, like: NkiTensor) -> np.ndarray[Any, Any]:
    mask: np.ndarray[Any, Any] = (read_native(predicate) != 0)
    return mask.reshape(like.shape)


def _affine(dst: NkiTensor, pattern: Any, offset: int, channel_multiplier: int,
            op: str) -> np.ndarray[Any, Any]:
    pairs = [(int(p[0]), int(p[1])) for p in pattern]
    counts = [n for _, n in pairs]
    if int(np.prod(counts)) != free_size(dst):
        raise fail("shape-mismatch", f"{op}: pattern {[list(p) for p in pairs]} has "
                                     f"{int(np.prod(counts))} elements but dst {dst.describe()} "
                                     f"has {free_size(dst)} per partition")
    parts = dst.shape[0]
    vals = np.full([parts, *counts], offset, np.int64)
    vals += (np.arange(parts, dtype=np.int64) * channel_multiplier).reshape(
        [parts] + [1] * len(counts))
    for i, (step, num) in enumerate(pairs):
        shape = [1] * (len(counts) + 1)
        shape[i + 1] = num
        vals += (np.arange(num, dtype=np.int64) * step).reshape(shape)
    return vals.reshape(dst.shape)


def iota(dst: NkiTensor, pattern: Any, offset: int = 0, channel_multiplier: int = 0,
         name: Any = None) -> None:
    dst = on_chip(dst, "iota", "dst", allow_psum=False)
    write(dst, _affine(dst, pattern, offset, channel_multiplier, "iota"), "iota")
    count("gpsimd", dst.size)


def affine_select(dst: NkiTensor, pattern: Any, channel_multiplier: int, on_true_tile: NkiTensor,
                  on_false_value: Any, cmp_op: Any = _equal, offset: int = 0,
                  name: Any = None) -> None:
    op = "affine_select"
    dst = on_chip(dst, op, "dst", allow_psum=False)
    on_true = on_chip(on_true_tile, op, "on_true_tile", allow_psum=False)
    same_elements(op, ("dst", dst), ("on_true_tile", on_true))
    affine = _affine(dst, pattern, offset, channel_multiplier, op)
    cmp = ops.binary(ops.op_name(cmp_op, "cmp_op") if cmp_op is not None else "equal")
    pred = cmp(affine, np.zeros((), np.int64))
    write(dst, np.where(pred, read(on_true).reshape(dst.shape), np.float32(on_false_value)), op)
    count("gpsimd", dst.size)
