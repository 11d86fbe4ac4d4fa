"""The cost model's figures as closed-form estimates, for choosers that cannot run a kernel.

The lowering picks tilings before a kernel exists (and in children that must not load the
simulator): these are the same figures the model places on its timelines (constants.py),
in the same rules (model.py), for one instruction or transfer at a time. Importing this
module loads no simulator (nkibot.sim and nkibot.sim.cost import lazily). Every figure is
a model estimate for `target`, not a measurement.
"""

from __future__ import annotations

from typing import Any

from nkibot.sim.cost import constants as C


def pe_ns(cycles: float, elem_bytes: int, target: str = "trn1") -> float:
    """TensorE ns of `cycles` bf16 cycles (fp32 operands take 4x, ARCH1:269)."""
    t = C.target(target)
    return cycles * (t.fp32_matmul_factor if elem_bytes == 4 else 1.0) / t.tensor_ghz


def matmul_ns(moving_free: int, elem_bytes: int, target: str = "trn1") -> float:
    """One matmul: max(N, 64) cycles (ARCH1:267), fp32 4x."""
    return pe_ns(max(float(moving_free), C.MM_INIT), elem_bytes, target)


def load_ns(nbytes: float, target: str = "trn1") -> float:
    """ns to move `nbytes` over all DMA queues at peak bandwidth (DMA:61-63)."""
    t = C.target(target)
    return nbytes / (t.dma_queues * t.dma_queue_bw)


def dma_ns(nbytes: float, run_bytes: int, partitions: int = 128, target: str = "trn1",
           latency: bool = True) -> float:
    """One transfer as the model costs it (model.dma / dma_queue_ns): min(P, 16) queues at
    the per-queue bandwidth, a per-descriptor cost per contiguous run of `run_bytes`, and
    the fixed latency before a consumer may start (DMA:41)."""
    t = C.target(target)
    lanes = max(1, min(partitions, t.dma_queues))
    per = nbytes / lanes
    busy = per / t.dma_queue_bw + per / max(run_bytes, 1) * C.DMA_DESCRIPTOR_NS.value
    return busy + (C.DMA_FIXED_NS.value if latency else 0.0)


def vector_ns(free: int, inputs: int = 1, elem_bytes: int = 4, target: str = "trn1",
              engine: str = "vector") -> float:
    """One Vector/Scalar instruction over `free` elements a partition: about N cycles a
    pass, two tensor inputs 2N on VectorE (ARCH1:393-395), at least the access overhead
    (ARCH1:774); trn2/trn3 lanes for 2-byte types (model.elementwise_parts). `inputs`
    counts the tensor inputs read from one memory: an SBUF and a PSUM input is 1
    (model.elementwise_parts, "two inputs, two memories")."""
    t = C.target(target)
    two = elem_bytes <= 2
    if engine == "scalar":
        lanes, ghz, passes = t.scalar_lanes[0 if two else 1], t.scalar_ghz, 1
    else:
        lanes, ghz, passes = t.vector_lanes[0 if two else 1], t.vector_ghz, max(1, min(inputs, 2))
    return max(passes * free / lanes, C.ACCESS_OVERHEAD.value) / ghz


def pass_ns(engine: str = "vector", elem_bytes: int = 4, target: str = "trn1") -> float:
    """ns per element a partition of one streaming pass on `engine` (vector, scalar or
    gpsimd): 1 / (lanes x clock), the slope of `vector_ns` without its overhead floor."""
    t = C.target(target)
    two = elem_bytes <= 2
    if engine == "scalar":
        return 1.0 / (t.scalar_lanes[0 if two else 1] * t.scalar_ghz)
    if engine == "gpsimd":
        return 1.0 / t.gpsimd_ghz
    return 1.0 / (t.vector_lanes[0 if two else 1] * t.vector_ghz)


def sbuf_bytes(target: str = "trn1") -> int:
    """SBUF bytes per partition (ARCH1:78, ARCH2:39, ARCH3:36)."""
    return C.target(target).sbuf_bytes


def psum_bytes(target: str = "trn1") -> int:
    """PSUM bytes per partition (8 banks of 2 KiB)."""
    return C.target(target).psum_bytes


#: trn1's SBUF partition: the lowering's budgets are fractions of it.
SBUF_BYTES = sbuf_bytes("trn1")


def operator_roofline(model: dict[str, Any], flops: float, low_precision: bool
                      ) -> dict[str, Any]:
    """`model` (a `CostReport.as_dict()`) with its roofline over the operator's FLOPs.

    The report's own compute bound counts the FLOPs the kernel executed on the Tensor
    Engine, which wasted work inflates: multiplying inserted zeros, or a diagonal matrix
    standing in for an elementwise product, raises the bound and so the fraction. The
    operator's count (PyTorch's, of the reference module, which the kernel cannot touch)
    over the peak for its dtype, against the launch's I/O bytes, is the roofline the
    issue defines. The executed count stays, as `executed_flops`.
    """
    try:
        t = C.target(str(model["target"]))
        span_ns = float(model["time_us"]) * 1000.0
        mem_ns = float(model["hbm_bytes"]) / (t.dma_queue_bw * t.dma_queues)
    except (KeyError, TypeError, ValueError):
        return model  # not a report of ours: leave it as it came
    peak = t.bf16_tflops if low_precision else t.fp32_tflops
    fl_ns = max(float(flops), 0.0) / (peak * 1e3)
    roof_ns = max(mem_ns, fl_ns)
    return {**model, "executed_flops": model.get("flops"), "flops": float(flops),
            "roofline_us": round(roof_ns / 1000.0, 3),
            "roofline_bound": "compute" if fl_ns > mem_ns else "memory",
            "roofline_fraction": round(roof_ns / span_ns, 4) if span_ns > 0 else 0.0,
            "roofline_basis": "the operator's FLOPs (PyTorch's count of the reference) "
                              "and the launch's I/O bytes"}
