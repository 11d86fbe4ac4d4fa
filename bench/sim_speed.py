"""Simulator speed: each kernel on the NKI CPU simulator vs its NumPy reference.

Run: `python bench/sim_speed.py [--reps 3] [--small] [--threads 1]`. Prints best-of-reps
seconds for the simulator and the reference, their ratio, and the geometric mean of the
ratios (target: <= 5x). Both sides run in this one process with the same BLAS thread count
(threadpoolctl; the OpenBLAS environment variables are left alone).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from nkibot.runner.sim import activate

P = 128


def build_kernels() -> dict[str, Any]:
    """Normal tiled NKI kernels, defined while our `nki` is active."""
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def rmsnorm(x, w):
        m, n = x.shape
        out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
        w_tile = nl.broadcast_to(nl.load(w.reshape((1, n))), (P, n))
        for i in nl.affine_range(m // P):
            t = nl.load(x[i * P:(i + 1) * P, :])
            sq = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
            ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=sq, op=nl.square, data=t, reduce_op=nl.add, reduce_res=ss)
            rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / n,
                               op1=nl.add, operand1=1e-6)
            nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
            r = nl.ndarray((P, n), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=r, data=t, op0=nl.multiply, operand0=rstd)
            nisa.tensor_tensor(dst=r, data1=r, data2=w_tile, op=nl.multiply)
            nl.store(out[i * P:(i + 1) * P, :], value=r)
        return out

    @nki.jit
    def matmul(lhs_t, rhs):
        k, m = lhs_t.shape
        n = rhs.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        for mi in nl.affine_range(m // P):
            for ni in nl.affine_range(n // 512):
                acc = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.psum)
                for ki in nl.affine_range(k // P):
                    lt = nl.load(lhs_t[ki * P:(ki + 1) * P, mi * P:(mi + 1) * P])
                    rt = nl.load(rhs[ki * P:(ki + 1) * P, ni * 512:(ni + 1) * 512])
                    nisa.nc_matmul(dst=acc, stationary=lt, moving=rt)
                res = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nl.store(out[mi * P:(mi + 1) * P, ni * 512:(ni + 1) * 512], value=res)
        return out

    @nki.jit
    def softmax(x):
        m, n = x.shape
        out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(m // P):
            t = nl.load(x[i * P:(i + 1) * P, :])
            neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
            e = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
            total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max, reduce_op=nl.add,
                            reduce_res=total)
            inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv, data=total)
            nisa.tensor_scalar(dst=e, data=e, op0=nl.multiply, operand0=inv)
            nl.store(out[i * P:(i + 1) * P, :], value=e)
        return out

    @nki.jit
    def add(a, b):
        m, n = a.shape
        out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(m // P):
            for j in nl.affine_range(n // 2048):
                at = nl.load(a[i * P:(i + 1) * P, j * 2048:(j + 1) * 2048])
                bt = nl.load(b[i * P:(i + 1) * P, j * 2048:(j + 1) * 2048])
                nl.store(out[i * P:(i + 1) * P, j * 2048:(j + 1) * 2048], value=nl.add(at, bt))
        return out

    return {"rmsnorm": rmsnorm, "matmul": matmul, "softmax": softmax, "add": add}


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
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="quarter-size inputs")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS threads for both sides (default 1: stable on shared hosts)")
    opts = parser.parse_args()
    ratios = []
    print(f"BLAS threads: {opts.threads} (simulator and reference alike)")
    with activate(force=True), threadpool_limits(limits=opts.threads, user_api="blas"):
        import nki

        kernels = build_kernels()
        print(f"{'kernel':10s} {'sim s':>9s} {'numpy s':>9s} {'ratio':>7s}  max|err|")
        for name, ref, args in cases(opts.small):
            t_sim, got = best_of(opts.reps, nki.simulate(kernels[name]), args)
            t_ref, want = best_of(opts.reps, ref, args)
            err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
            ratios.append(t_sim / t_ref)
            print(f"{name:10s} {t_sim:9.4f} {t_ref:9.4f} {t_sim / t_ref:7.2f}  {err:.2e}")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean ratio: {geo:.2f}x (target <= 5x)")


if __name__ == "__main__":
    main()
