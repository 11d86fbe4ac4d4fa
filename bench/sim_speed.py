"""Simulator speed: each conformance kernel on the NKI CPU simulator vs its NumPy reference.

Run: `python bench/sim_speed.py [--reps 3] [--small] [--threads 1] [--cost-model]`. Prints
best-of-reps CPU seconds of this process (on a shared host, wall-clock time also counts other
processes' turns; with one BLAS thread, CPU time is the run's own work) for the simulator
and the reference, their ratio, and the geometric mean of the ratios (target: <= 3x).
`--cost-model` also times each kernel with the cost model recording (full numerics, as a
verify run with the model on, its report built) and prints the overhead (target: <= 25%);
plain and costed runs alternate. Both sides run in this one process with the same BLAS
thread count (threadpoolctl; the OpenBLAS environment variables are left alone).

`--kernelbench DIR` times KernelBench-sized kernels instead: the lowering's kernel for a
GEMM (level 1), a 3-D conv (level 1), a GEMM with its epilogue chain (level 2, ~17,600
instructions), a scan (level 1 cumsum, few large instructions) and two convs whose
epilogues are transcendental (level 2 4, two Mish; level 2 54, GELU), each file shrunk to
4M elements per input (`bench/shrink.py`), against PyTorch's CPU run of the module on the
same inputs (one thread), and the simulator's per-instruction overhead: (simulator -
reference seconds) / instructions issued, in µs.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from nkibot.sim import activate

CONFORMANCE = Path(__file__).resolve().parent.parent / "tests" / "sim" / \
    "conformance_kernels.py"


def build_kernels() -> dict[str, Any]:
    """The simulator's conformance kernels (the tests' own), loaded while our `nki` is active."""
    spec = importlib.util.spec_from_file_location("conformance_kernels", CONFORMANCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"rmsnorm": module.rmsnorm, "matmul": module.matmul, "softmax": module.softmax,
            "add": module.tiled_add}


def _ref_rmsnorm(x: Any, w: Any) -> Any:
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6) * w


def _ref_softmax(x: Any) -> Any:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _ref_add_bf16(a: Any, b: Any) -> Any:
    return (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)


def cases(small: bool) -> list[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
    s = 4 if small else 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096 // s, 4096 // s), dtype=np.float32)
    w = rng.standard_normal(4096 // s, dtype=np.float32)
    lt = rng.standard_normal((2048 // s, 2048 // s), dtype=np.float32)
    rh = rng.standard_normal((2048 // s, 2048 // s), dtype=np.float32)
    sm = rng.standard_normal((8192 // s, 2048 // s), dtype=np.float32)
    a = rng.standard_normal((4096 // s, 4096), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((4096 // s, 4096), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return [
        ("rmsnorm", _ref_rmsnorm, (x, w)),
        ("matmul", lambda p, q: p.T @ q, (lt, rh)),
        ("softmax", _ref_softmax, (sm,)),
        ("add", _ref_add_bf16, (a, b)),
    ]


def best_of(reps: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(reps):
        start = time.process_time()
        out = fn(*args)
        best = min(best, time.process_time() - start)
    return best, out


def interleaved(reps: int, plain: Callable[..., Any], costed: Callable[..., Any],
                args: tuple[Any, ...]) -> tuple[float, Any, float]:
    """Best-of-reps seconds of `plain` and `costed`, run alternately (and `plain`'s output)."""
    best_plain = best_costed = math.inf
    out = None
    for i in range(reps):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            start = time.process_time()
            got = (plain if which == 0 else costed)(*args)
            took = time.process_time() - start
            if which == 0:
                best_plain, out = min(best_plain, took), got
            else:
                best_costed = min(best_costed, took)
    return best_plain, out, best_costed


KERNELBENCH = {
    "gemm": "level1/1_Square_matrix_multiplication_.py",
    "conv3d": "level1/54_conv_standard_3D__square_input__square_kernel.py",
    "l2-epilogue": "level2/12_Gemm_Multiply_LeakyReLU.py",
    "scan": "level1/89_cumsum.py",
    "l2-conv-mish": "level2/4_Conv2d_Mish_Mish.py",
    "l2-conv-gelu": "level2/54_Conv2d_Multiply_LeakyReLU_GELU.py",
}


def kernelbench(root: Path, reps: int, only: list[str] | None) -> None:
    """Each KernelBench case: simulator vs PyTorch seconds, and µs per instruction."""
    import sys
    import tempfile
    import types

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from shrink import shrink_source

    from nkibot.convert.taskload import load_task
    from nkibot.lowering import Lowered, lower_task
    from nkibot.sim import stats
    from nkibot.task import describe_kernel_args
    from nkibot.verify.protocol import random_array, to_kernel_dtype

    torch.set_num_threads(1)
    print(f"{'case':20s} {'sim s':>9s} {'torch s':>9s} {'ratio':>7s} {'instr':>8s} "
          f"{'µs/instr':>9s}")
    for name, rel in KERNELBENCH.items():
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(rel).name
            path.write_text(shrink_source((root / rel).read_text(), 4194304).source)
            task = load_task(path, "Model")
        lowered = lower_task(task)
        if not isinstance(lowered, Lowered):
            print(f"{name:20s} declined: {lowered.reason[:80]}")
            continue
        rng = np.random.default_rng(0)
        arrays = [to_kernel_dtype(random_array(list(a.shape), a.dtype, rng))
                  for a in describe_kernel_args(task)]
        with activate(force=True):
            import nki

            module = types.ModuleType("kb_kernel")
            exec(compile(lowered.source, "kernel.py", "exec"), module.__dict__)
            t_sim, _ = best_of(reps, nki.simulate(module.__dict__[lowered.function]),
                               tuple(a.copy() for a in arrays))
            issued = int(sum((stats().get("instructions") or {}).values()))
        t_ref = _torch_seconds(task, reps)
        per = 1e6 * (t_sim - t_ref) / issued if issued else float("nan")
        print(f"{name:20s} {t_sim:9.3f} {t_ref:9.3f} {t_sim / t_ref:7.1f} {issued:8d} "
              f"{per:9.1f}")


def _torch_seconds(task: Any, reps: int) -> float:
    """PyTorch's CPU run of the task's module on inputs of its shapes (fp32, one thread)."""
    import types

    import torch

    module = types.ModuleType("kb_reference")
    exec(compile(task.reference_source, "reference.py", "exec"), module.__dict__)
    model = module.__dict__[task.entry_point](*task.init_args).eval()
    inputs = [torch.randn(tuple(s.shape)) for s in task.inputs]
    with torch.no_grad():
        seconds, _ = best_of(reps, model, tuple(inputs))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="quarter-size inputs")
    parser.add_argument("--cost-model", action="store_true",
                        help="also time the simulator with the cost model on")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS threads for both sides (default 1: stable on shared hosts)")
    parser.add_argument("--kernelbench", type=Path, default=None, metavar="DIR",
                        help="KernelBench root (level1, level2): time KernelBench-sized cases")
    parser.add_argument("--only", action="append", default=None, choices=sorted(KERNELBENCH))
    opts = parser.parse_args()
    if opts.kernelbench is not None:
        with threadpool_limits(limits=opts.threads, user_api="blas"):
            kernelbench(opts.kernelbench, opts.reps, opts.only)
        return
    ratios: list[float] = []
    overheads: list[float] = []
    print(f"BLAS threads: {opts.threads} (simulator and reference alike)")
    with activate(force=True), threadpool_limits(limits=opts.threads, user_api="blas"):
        import nki

        kernels = build_kernels()
        print(f"{'kernel':10s} {'sim s':>9s} {'numpy s':>9s} {'ratio':>7s}  max|err|")
        for name, ref, args in cases(opts.small):
            if opts.cost_model:  # alternate the two, so drifting host load hits both alike
                t_sim, got, t_cost = interleaved(opts.reps, nki.simulate(kernels[name]),
                                                 _with_model(kernels[name]), args)
            else:
                t_sim, got = best_of(opts.reps, nki.simulate(kernels[name]), args)
            t_ref, want = best_of(opts.reps, ref, args)
            err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
            ratios.append(t_sim / t_ref)
            print(f"{name:10s} {t_sim:9.4f} {t_ref:9.4f} {t_sim / t_ref:7.2f}  {err:.2e}")
            if opts.cost_model:
                overheads.append(t_cost / t_sim)
                print(f"{'':10s} with cost model {t_cost:9.4f} s: "
                      f"+{100 * (t_cost / t_sim - 1):.1f}%")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean ratio: {geo:.2f}x (target <= 3x)")
    if overheads:
        over = math.exp(sum(math.log(r) for r in overheads) / len(overheads))
        print(f"cost model overhead, geometric mean: +{100 * (over - 1):.1f}% (target <= 25%)")


def _with_model(kernel: Any) -> Callable[..., Any]:
    """The kernel run with a cost-model recorder attached (numerics on)."""
    from nkibot.sim.cost import Recorder, target
    from nkibot.sim.cost.report import build
    from nkibot.sim.runtime import run

    def go(*args: Any) -> Any:
        rec = Recorder(target("trn1"))
        out = run(kernel.fn, args, {}, 1, cost=rec)
        build(rec, 0, cost_only=False)  # the report: every instruction placed
        return out

    return go


if __name__ == "__main__":
    main()
