"""What one instruction costs on its engine, from the figures in constants.py.

Inputs are what the issue hook saw: the engine the simulator ran it on, the op name and
the tiles read and written. Nothing here is per-instruction special-casing beyond the
engine class: an instruction added to the simulator later gets its engine's rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nkibot.sim.cost import constants as C
from nkibot.sim.storage import handle
from nkibot.sim.tensor import MemoryRegion, NkiTensor

PSUM = MemoryRegion.psum
ON_CHIP = (MemoryRegion.sbuf, MemoryRegion.psum)


@dataclass
class Knobs:
    """The ranged figures the model uses (defaults: constants.py `value`s)."""

    access_overhead: float = C.ACCESS_OVERHEAD.value
    dependent_overhead: float = C.DEPENDENT_OVERHEAD.value
    dma_fixed_ns: float = C.DMA_FIXED_NS.value
    dma_descriptor_ns: float = C.DMA_DESCRIPTOR_NS.value
    #: Cost innermost affine loops of small instructions as the legacy compiler's loop
    #: vectorization would (vectorize.py); off for today's compiler, whose affine_range is
    #: an alias of range.
    loop_vectorize: bool = False
    #: An instruction whose tiles are ready may take a gap its engine left idle before a
    #: later-issued one (the compiler schedules independent iterations, timeline.py).
    fill_gaps: bool = True
    #: Remove instructions whose results are never read (deadcode.py), as the Neuron
    #: graph compiler did for legacy (NKI 1) kernels; off for today's NKI compiler.
    dead_code: bool = False
    #: False: no SBUF/PSUM capacity check (a kernel its compiler had to spill still gets
    #: an estimate, without the spill traffic; the calibration bench labels such rows).
    check_capacity: bool = True
    #: Physical buffers the tiles one source line allocates rotate through (liveness.py);
    #: the migration guide's example (constants.LOOP_BUFFERS).
    loop_buffers: float = C.LOOP_BUFFERS.value
    #: Spill and reload what exceeds a partition's SBUF/PSUM (liveness.py); only a kernel
    #: run without the simulator's capacity check (`check_capacity=False`) can exceed it.
    model_spills: bool = True
    #: Instructions ahead of its next use a spilled tile is reloaded (liveness.py; an
    #: assumption, constants.SPILL_LEAD).
    spill_lead: float = C.SPILL_LEAD.value


def free_elems(t: NkiTensor) -> int:
    shape = t.shape
    n = 1
    for s in shape[1:]:
        n *= s
    return n


def _strided(t: NkiTensor) -> bool:
    """The most-minor free dim steps over more than 16 bytes (ARCH1:759-762)."""
    arr = handle(t).arr
    if arr.ndim < 2 or arr.shape[-1] < 2:
        return False
    return abs(arr.strides[-1]) > C.STRIDE_BYTES


def matmul(target: C.Target, reads: list[NkiTensor], writes: list[NkiTensor],
           op: str) -> tuple[float, float, bool]:
    """(ns, flops, fp32) of one TensorE instruction: max(N, 64) cycles, fp32 4x slower."""
    dst = writes[0] if writes else None
    n = free_elems(dst) if dst is not None else 128
    fp32 = any(t.dtype.itemsize == 4 for t in reads if t.buffer is MemoryRegion.sbuf)
    cycles = max(float(n), target.mm_init_cycles)
    if fp32:
        cycles *= target.fp32_matmul_factor
    flops = 0.0
    if dst is not None and reads and "transpose" not in op and "broadcast" not in op:
        k = reads[-1].shape[0]
        flops = 2.0 * k * dst.shape[0] * n
    return cycles / target.tensor_ghz, flops, fp32


#: What the Vector/Scalar/GpSimd rule needs of an on-chip operand: (free elements, bytes
#: per element, innermost stride over 16 B, in PSUM).
Operand = tuple[int, int, bool, bool]


def operand(t: NkiTensor) -> Operand:
    return free_elems(t), t.dtype.itemsize, _strided(t), t.buffer is MemoryRegion.psum


def elementwise(target: C.Target, engine: str, reads: list[NkiTensor],
                writes: list[NkiTensor], knobs: Knobs, scale: int = 1) -> float:
    """ns of one Vector/Scalar/GpSimd instruction: about N cycles a pass over free size N.

    `scale`: the instruction stands for that many iterations of a vectorised loop body.
    """
    return elementwise_of(target, engine, [operand(t) for t in reads if t.buffer in ON_CHIP],
                          [operand(t) for t in writes if t.buffer in ON_CHIP], knobs, scale)


def elementwise_of(target: C.Target, engine: str, ins: list[Operand], outs: list[Operand],
                   knobs: Knobs, scale: int = 1) -> float:
    """`elementwise` from the on-chip operands' `operand` facts (read, then written)."""
    return elementwise_parts(target, engine, ins, outs, knobs, scale)[0]


def elementwise_parts(target: C.Target, engine: str, ins: list[Operand], outs: list[Operand],
                      knobs: Knobs, scale: int = 1) -> tuple[float, float, float]:
    """(ns, streaming ns, ns of the dependent overhead) of one instruction.

    ns: the streaming time (N cycles a pass) but at least the ~60-cycle access overhead,
    which the engines hide behind independent work (ARCH1:774-775). An instruction that
    reads what the engine's previous one wrote costs the streaming time plus the static
    overhead ARCH1:403 adds "to the above execution cost estimate" (the N / 2N cycles of
    ARCH1:393-395): the scheduler uses max(ns, streaming + dependent) for it.
    """
    both = ins + outs
    n = max((f for f, _, _, _ in both), default=1) * scale
    # ARCH1:393-395: one input tile about N cycles, two input tiles about 2N (VectorE);
    # ScalarE reads at most one tensor per instruction (ARCH1:497-499). ASSUMED (no
    # document says it; docs/cost-model.md, "Two inputs, two memories"): the 2N is two
    # tiles streaming through one memory's read interface, and SBUF and PSUM each drive
    # their own interface at peak at once (ARCH1:769-771), so an SBUF and a PSUM input
    # stream side by side: N cycles.
    big = [psum for f, _, _, psum in ins if f > 1]
    per_memory = max(big.count(True), big.count(False))
    passes = 1 if engine == "scalar" else max(1, min(per_memory, 2))
    two_byte = bool(both) and all(b <= 2 for _, b, _, _ in both)
    if engine == "vector":
        lanes, ghz = target.vector_lanes[0 if two_byte else 1], target.vector_ghz
    elif engine == "scalar":
        lanes, ghz = target.scalar_lanes[0 if two_byte else 1], target.scalar_ghz
    else:
        lanes, ghz = 1.0, target.gpsimd_ghz
    cycles = passes * n / lanes
    if any(s for _, _, s, _ in both):
        cycles *= C.STRIDE_PENALTY
    return max(cycles, knobs.access_overhead) / ghz, cycles / ghz, knobs.dependent_overhead / ghz


def contiguous_bytes(t: NkiTensor) -> int:
    """Bytes of the longest run that is contiguous in memory (per partition on chip)."""
    arr = handle(t).arr
    item = arr.itemsize
    run = item
    start = 1 if t.buffer in ON_CHIP else 0
    for dim in range(arr.ndim - 1, start - 1, -1):
        if arr.shape[dim] == 1:
            continue
        if arr.strides[dim] != run:
            break
        run *= arr.shape[dim]
    return run


def dma(target: C.Target, reads: list[NkiTensor], writes: list[NkiTensor],
        knobs: Knobs, run_of: Callable[[NkiTensor], int] = contiguous_bytes
        ) -> tuple[float, int, int]:
    """(bytes, lanes, run): bytes moved, queues it spreads over, contiguous bytes a run.

    DMA:99 "Fewer partitions means fewer engines utilized": a transfer over P partitions
    uses min(P, 16) of the 16 queues. `run_of`: a tensor's contiguous run (a cached
    `contiguous_bytes`).
    """
    dst = writes[0] if writes else (reads[0] if reads else None)
    if dst is None:
        return 0.0, 1, 1
    nbytes = float(dst.size * dst.dtype.itemsize)
    sides = [t for t in (reads[:1] + writes[:1])]
    chip = [t for t in sides if t.buffer in ON_CHIP]
    parts = chip[0].shape[0] if chip else target.dma_queues
    run = min(run_of(t) for t in sides)
    return nbytes, max(1, min(parts, target.dma_queues)), max(run, 1)


def dma_queue_ns(target: C.Target, nbytes: float, run: int, knobs: Knobs) -> float:
    """Time a queue is busy moving `nbytes` in runs of `run` contiguous bytes."""
    runs = nbytes / run
    return nbytes / target.dma_queue_bw + runs * knobs.dma_descriptor_ns
