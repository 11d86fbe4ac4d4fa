"""Documented hardware figures per generation, each citing where it was read.

Sources (aws-neuron/aws-neuron-sdk, folder nki/):
  ARCH1 = guides/architecture/trainium_inferentia2_arch.rst (NeuronCore-v2, trn1)
  ARCH2 = guides/architecture/trainium2_arch.rst (NeuronCore-v3, trn2)
  ARCH3 = guides/architecture/trainium3_arch.rst (NeuronCore-v4, trn3)
  PERF  = deep-dives/nki_perf_guide.rst
  DMA   = deep-dives/nki-dma-bandwidth-guide.rst
A figure the documents give as a range is a `Ranged` value: the model uses `value`, and
docs/cost-model.md records which ones were tuned inside their range and why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ranged:
    """A documented figure with its documented range; `value` is what the model uses."""

    value: float
    low: float
    high: float
    source: str


@dataclass(frozen=True)
class Target:
    """One generation's figures. Clocks in GHz (cycles per ns), bandwidths in B/ns."""

    name: str
    tensor_ghz: float
    vector_ghz: float
    scalar_ghz: float
    gpsimd_ghz: float
    #: elements per cycle per partition for 2-byte / other dtypes (data-path width / 128)
    vector_lanes: tuple[float, float]
    scalar_lanes: tuple[float, float]
    mm_init_cycles: float  # max(N, MM_INIT_LATENCY) per matmul
    fp32_matmul_factor: float
    bf16_tflops: float
    fp32_tflops: float
    dma_queues: int
    dma_queue_bw: float
    #: Trn1: VectorE/GpSimd share the SBUF port, VectorE/ScalarE the PSUM port.
    shared_ports: bool
    #: Bytes per partition of SBUF and PSUM (ARCH1:78, ARCH2:39, ARCH3:36 via
    #: nkibot/sim/targets.py's rules): where live tiles above them are spilled.
    sbuf_bytes: int = 192 * 1024
    psum_bytes: int = 16 * 1024


#: ARCH1:267 "MM_INIT_LATENCY is 64 TensorE cycles on NeuronCore-v2"; PERF:679 the same.
MM_INIT = 64.0
#: ARCH1:269 "For FP32 input data type, the instruction cost is roughly 4x higher".
FP32_MM = 4.0
#: The minimum cost of a Vector/Scalar/GpSimd instruction: ARCH1:774 "Initiating a tensor
#: access request ... incurs a static overhead approximately 60 cycles", ARCH1:403 "a
#: static instruction overhead of 100 engine cycles", PERF:417 "~100 cycles".
ACCESS_OVERHEAD = Ranged(64.0, 60.0, 100.0, "ARCH1:774, ARCH1:403, PERF:417")
#: Extra cycles when an instruction reads what the same engine's previous instruction
#: wrote (no pipelining): ARCH1:403 adds 100 cycles; PERF:428 measured an initiation
#: interval of 264 ScalarE cycles for dependent one-element instructions.
DEPENDENT_OVERHEAD = Ranged(100.0, 100.0, 200.0, "ARCH1:403, PERF:428")
#: ARCH1:759-762 "If the most-minor F dimension stride exceeds 16 bytes, the achievable
#: bandwidth ... will be half".
STRIDE_BYTES, STRIDE_PENALTY = 16, 2.0
#: DMA: DMA:41 "descriptor setup, synchronization, and semaphore-to-start latency (~1300
#: ns cross-engine)"; the issue's reading of the guides: 1.3-2 us per transfer.
DMA_FIXED_NS = Ranged(1300.0, 1300.0, 2000.0, "DMA:41")
#: DMA:55-82: >= 4 KiB contiguous per partition saturates, >= 2 KiB "approaches peak",
#: 256 B-2 KiB "improving but still below peak", < 256 B "a small fraction of peak". We
#: read it as a per-descriptor cost `d`: efficiency = c / (c + d * bw) for a run of c
#: bytes; the range keeps 2 KiB at 67-89 % and 256 B at 20-50 % of peak.
DMA_DESCRIPTOR_NS = Ranged(15.0, 15.0, 60.0, "DMA:55-82")
#: Loop vectorization (legacy compiler, `Knobs.loop_vectorize`): the legacy affine_range
#: docstring (SDK v2.26.0 general/nki/api/nki/language/__init__.py:238-241) says the
#: compiler vectorises affine loops but not how far. ASSUMED, not documented: an
#: innermost affine loop is vectorised when its body's instructions, merged, stay within
#: 512 elements per partition (one 2 KiB PSUM bank of fp32, ARCH1:778-781, the largest
#: tile the ISA's matmul path handles). Chosen knowing the conv1d chain: a 64-iteration
#: loop of 3-element ops (step 6) was measured 10x faster than the same body in a loop of
#: 2048 (step 5); any bound from 192 to 6143 separates them, this one has a documented size.
VECTORIZE_MAX_FREE = 512
#: Buffers the tiles allocated at one source line (a loop body's tile) rotate through
#: (liveness.py). MIGRATION:1360-1380: "At the very minimum, only 1 physical tile ... needs
#: to be alive. Then the execution is completely serialized" and "the compiler could choose
#: to allocate 2 physical tiles ... then the DMA copy from HBM to SBUF can overlap with the
#: exponential operation". The count the compiler picks is not documented: 2 is the
#: guide's example (MIGRATION = nki/migration/index.rst).
LOOP_BUFFERS = Ranged(2.0, 1.0, 2.0, "MIGRATION:1360-1380")

#: How far ahead of its next use the compiler reloads a spilled tile, in instructions of
#: the stream (liveness.py): the reload is issued after the instruction `SPILL_LEAD`
#: before the use, and the tile holds its room from there. ASSUMED, no document gives it
#: (docs/cost-model.md, "Spills"): 1 reloads just before the use (the rule before
#: 2026-12-05); 16, one reload in flight per DMA engine (DMA:39), is the top of the
#: range. 4: the knee, past which more lead moves the over-capacity calibration points by
#: under 5 % (and costs room: earlier reloads evict more).
SPILL_LEAD = Ranged(4.0, 1.0, 16.0, "assumption (liveness.py)")

TRN1 = Target(
    name="trn1",
    tensor_ghz=2.8, vector_ghz=1.12, scalar_ghz=1.4, gpsimd_ghz=1.4,  # ARCH1:67-73
    vector_lanes=(1.0, 1.0), scalar_lanes=(1.0, 1.0),  # ARCH1:71 "128 input/output"
    mm_init_cycles=MM_INIT, fp32_matmul_factor=FP32_MM,
    bf16_tflops=92.0, fp32_tflops=23.0,  # ARCH1:103
    dma_queues=16, dma_queue_bw=17.0,  # DMA:61
    shared_ports=True,  # ARCH1:764-767 (VectorE/GpSimd SBUF, VectorE/ScalarE PSUM)
)
TRN2 = Target(
    name="trn2",
    tensor_ghz=2.4, vector_ghz=0.96, scalar_ghz=1.2, gpsimd_ghz=1.2,  # ARCH2:48-64
    vector_lanes=(4.0, 2.0),  # ARCH2:56 "512 BF16/FP16 ...; 256 for other data types"
    scalar_lanes=(1.0, 1.0),  # ARCH2:59 "128 input/output"
    mm_init_cycles=MM_INIT, fp32_matmul_factor=FP32_MM,  # not restated for v3: ARCH1's
    bf16_tflops=79.0, fp32_tflops=20.0,  # ARCH2:71
    dma_queues=16, dma_queue_bw=23.0,  # DMA:62
    shared_ports=False,  # ARCH2:268-273 "can access SBUF/PSUM in parallel"
    sbuf_bytes=224 * 1024,  # ARCH2:39 "28 MiB = 128 x 224 KiB"
)
TRN3 = Target(
    name="trn3",
    tensor_ghz=2.4, vector_ghz=1.2, scalar_ghz=1.2, gpsimd_ghz=1.2,  # ARCH3:45-61
    vector_lanes=(4.0, 2.0),  # ARCH3:53 "512 BF16/FP16/FP8 ...; 256 for other types"
    scalar_lanes=(2.0, 1.0),  # ARCH3:57 "256 BF16/FP16/FP8 ...; 128 for other types"
    mm_init_cycles=MM_INIT, fp32_matmul_factor=FP32_MM,
    bf16_tflops=79.0, fp32_tflops=20.0,  # ARCH3:68
    dma_queues=16, dma_queue_bw=33.0,  # DMA:63
    shared_ports=False,
    sbuf_bytes=256 * 1024,  # ARCH3:36 "32 MiB"
)
TARGETS = {t.name: t for t in (TRN1, TRN2, TRN3)}


def target(name: str) -> Target:
    """The figures for `name` (trn1/trn2/trn3, or gen2/gen3/gen4)."""
    key = {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}.get(name, name)
    if key not in TARGETS:
        raise ValueError(f"unknown target {name!r}: the cost model knows trn1, trn2, trn3")
    return TARGETS[key]
