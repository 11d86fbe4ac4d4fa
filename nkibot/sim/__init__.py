"""The NKI CPU simulator: `nki` / `nki.language` / `nki.isa` implemented on NumPy.

Usage::

    from nkibot.sim import activate, ConstraintError, KernelError, stats

    with activate():                      # installs our nki modules in sys.modules
        import nki, nki.language as nl, nki.isa as nisa
        mod = load_kernel_file(...)       # a file that does `import nki` etc.
        out = nki.simulate(mod.kernel)(a, b)   # or mod.kernel(a, b); mod.kernel[2](a, b)
    stats()  # counters of the last launch

`activate(force=False, target=None)` leaves a real installed `nki` alone unless
`force=True`; our modules carry `__nkibot_sim__ = True`. Generation: `target=` (trn1,
trn2, trn3), else NEURON_PLATFORM_TARGET_OVERRIDE as the official simulator reads it
(trn1|inf2|gen2, trn2|gen3, trn3|gen4), else trn3; the rules per generation, each with
its documentation line, are in `targets.py` (docs/generations.md). Inputs are NumPy arrays (bf16/fp8
as ml_dtypes arrays); float64 is refused (rule `float64-input`). Inputs a kernel writes are
updated in place. Results come back as NumPy arrays (a tuple for a tuple). `kernel[2]`
runs two logical cores, one thread each (`lnc.py`: one runs at a time, switching only at
`core_barrier` / `sendrecv` or when one finishes, so runs are deterministic and deadlocks
raise `lnc-sync`), `nl.program_id(0)` in {0, 1}; `shared_hbm` tensors are one tensor
shared by both.

Semantics: every instruction runs eagerly; engines compute in fp32 and round to the
destination dtype on write (ml_dtypes, nearest even). New allocations hold NaN (floats) or
4 (ints). Slices are bounds-checked. PSUM: the first matmul of a group overwrites,
`accumulate=True` adds (only onto matmul-written PSUM), `accumulate=None` infers per
element; reading PSUM out with another engine ends the group. A group's matmuls run as one
GEMM when the result is first needed (fp32 summation order may differ from eager tiles,
as on hardware). Live SBUF over 192/224/256 KiB (trn1/trn2/trn3) or
PSUM over 16 KiB (8 x 2 KiB banks) per partition is refused; an allocation is live while a
view of it is referenced (tiles allocated in a loop body recycle each iteration).

Host boundary (opaque.py), as on hardware: tensors have no public backing array; NumPy
applied to a tensor (`np.exp(t)`, `np.asarray(t)`) raises `host-compute` naming the
nl/nisa op to use; `bool/int/float/index` of a tensor raise `data-dependent-control`;
results are tensors the kernel allocated in this launch (else `result-illegal`; returning
nothing is fine when the kernel writes its inputs in place); an hbm or on-chip result is
copied out as the official simulator does, with a note in `stats()["notes"]` (the
compiler wants shared_hbm outputs).

Errors: `ConstraintError` (a hardware rule) and `KernelError` (anything else raised in the
kernel, rule `kernel-exception`) carry `rule`, `file`, `line`, `fix`; str() reads
"[rule] detail (at kernel.py:42); fix: hint". Rules: partition-dim, partition-mismatch,
shape-mismatch, buffer-illegal, out-of-bounds, matmul-contraction, matmul-stationary-free,
matmul-moving-free, psum-bank, psum-accumulate, psum-capacity, sbuf-capacity,
dtype-illegal, float64-input, reduce-axis0, reduce-axis, broadcast, read-only,
view-illegal, op-illegal, arch-unsupported, lnc-sync, lnc-race, loop-illegal, unsupported,
host-compute, data-dependent-control, result-illegal.

`stats()` -> {"instructions": {engine: n}, "elements": {engine: n}, "dma_bytes": n,
"peak_sbuf_bytes_per_partition": n, "peak_psum_bytes_per_partition": n}; engines are
tensor, vector, scalar, gpsimd, dma. Elements: output elements (matmul: M*N per call;
DMA: elements moved).

nl (nki.language), shapes are tuples, `dtype=` optional on math:
  ndarray(shape, dtype, buffer=sbuf, name="") zeros/ones(shape, dtype, buffer=sbuf)
  full(shape, fill_value, dtype, buffer=sbuf) zeros_like/empty_like(x, dtype=None, buffer=None)
  load(src_hbm, dtype=None) -> sbuf tile; store(dst_hbm, value); load_transpose2d(src)
  copy(x, dtype=None); matmul(x, y, transpose_x=False) -> psum; transpose(x) -> psum
  broadcast_to(x, shape); expand_dims(x, axis); where(cond, x, y); softmax(x, axis=-1)
  rms_norm(x, w, axis, n, epsilon=1e-6); sum/max/min/mean/prod/var/all(x, axis, dtype=None,
  keepdims=False) (free axes only; var always keeps dims)
  binary (x, y, dtype=None): add subtract multiply divide maximum minimum power fmod mod
  abs_max abs_min equal not_equal less less_equal greater greater_equal logical_and/or/xor
  bitwise_and/or/xor left_shift right_shift -- same shapes or a scalar (no implicit tile
  broadcasting: rule `broadcast`)
  unary (x, dtype=None): exp log sqrt rsqrt square reciprocal abs negative tanh sigmoid relu
  gelu gelu_apprx_tanh gelu_apprx_sigmoid gelu_dx silu silu_dx softplus mish erf erf_dx sin
  cos tan arctan sign floor ceil trunc logical_not invert copy bypass
  ds(start, size); affine_range/sequential_range/static_range(start, stop=None, step=1)
  program_id(axis=0) num_programs(axes=0) device_print(prefix, t) no_reorder()
  shared_identity_matrix(n, dtype=uint8) tile_size.{pmax=128, psum_fmax=512,
  gemm_stationary_fmax=128, gemm_moving_fmax=512, bn_stats_fmax=512, psum_num_banks=8}
  buffers sbuf psum hbm private_hbm shared_hbm; dtypes float32 bfloat16 float16 tfloat32
  float8_e4m3 float8_e4m3fn float8_e5m2 int8/16/32 uint8/16/32 bool_
NkiTensor: .shape .dtype .buffer .ndim t[i, a:b, nl.ds(s, n), ...] (on-chip int index on
  dim 0 keeps the dim) .reshape(shape) .permute(dims) .broadcast_to(shape)
  .broadcast(dim, size) .expand_dim(d) .squeeze_dim(d) .ap(pattern, offset=None)
  .view(dtype); t[...] = tile_or_scalar copies on chip.
nisa (nki.isa), dst first, `op`s are nl functions or numpy ufuncs:
  dma_copy(dst, src) tensor_copy(dst, src, engine=None) memset(dst, value)
  nc_matmul(dst, stationary, moving, accumulate=None, ...)
      # dst[M, N] (psum fp32) = stationary[K, M].T @ moving[K, N]
  nc_transpose(dst, data, engine=None)
  tensor_tensor(dst, data1, data2, op)
  tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False)
  activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
             reduce_cmd=reduce_cmd.idle)   # op(data*scale + bias); bias a [P,1] tile on trn1
  activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0)
  tensor_reduce(dst, op, data, axis, negate=False, keepdims=False)
  reciprocal(dst, data) iota(dst, pattern, offset=0, channel_multiplier=0)
  affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                cmp_op=nl.equal, offset=0)
  tensor_copy_predicated(dst, src, predicate, reverse_pred=False) bn_stats(dst, data)
  bn_aggr(dst, data) exponential(...) (Trn3 only) get_nc_version()
  enums engine, reduce_cmd, dge_mode, oob_mode, nc_version, matmul_perf_mode, dma_engine
  ... and every other function of the official nki.isa / nki.language API (scans, selects,
  top-k, gathers, RNG, registers and nl.fori_loop / nl.while_loop, MX, indirect access
  through .ap(scalar_offset=, vector_offset=)): see docs/simulator.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nkibot.sim.errors import ConstraintError, KernelError, SimError
    from nkibot.sim.runtime import Kernel, activate, jit, run, simulate, stats
    from nkibot.sim.storage import MemoryRegion
    from nkibot.sim.tensor import NkiTensor

# Loaded on first use, so that `nkibot.sim.cost.constants` / `.quick` (the lowering's
# figures) import without the simulator (NumPy, ml_dtypes, the nki namespaces).
_LAZY = {"ConstraintError": "errors", "KernelError": "errors", "SimError": "errors",
         "Kernel": "runtime", "activate": "runtime", "jit": "runtime", "run": "runtime",
         "simulate": "runtime", "stats": "runtime", "MemoryRegion": "storage",
         "NkiTensor": "tensor"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nkibot.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nkibot.sim.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "ConstraintError",
    "Kernel",
    "KernelError",
    "MemoryRegion",
    "NkiTensor",
    "SimError",
    "activate",
    "jit",
    "run",
    "simulate",
    "stats",
]
