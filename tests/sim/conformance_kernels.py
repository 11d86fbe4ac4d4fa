"""Conformance kernels in the `nki` dialect, shared by the sim and neuron backends.

Import this file with `import nki` resolving to the backend under test: the simulator's
modules inside `activate()`, or the real package on a Trn1 host.
"""

import nki
import nki.isa as nisa
import nki.language as nl

P = 128


@nki.jit
def tiled_add(a, b):
    """out = a + b over [M, N] tiles of [128, 512], ragged edges included."""
    m, n = a.shape
    out = nl.ndarray((m, n), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((m + P - 1) // P):
        rows = min(P, m - i * P)
        for j in nl.affine_range((n + 511) // 512):
            cols = min(512, n - j * 512)
            a_t = nl.load(a[nl.ds(i * P, rows), nl.ds(j * 512, cols)])
            b_t = nl.load(b[nl.ds(i * P, rows), nl.ds(j * 512, cols)])
            nl.store(out[nl.ds(i * P, rows), nl.ds(j * 512, cols)], value=nl.add(a_t, b_t))
    return out


@nki.jit
def exp_kernel(x):
    """out = exp(x) through the Scalar engine, one [rows, n] tile per 128 rows."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // P):
        t = nl.ndarray((P, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * P:(i + 1) * P, :])
        r = nl.ndarray((P, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=r, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=r)
    return out


@nki.jit
def softmax(x):
    """Row softmax: max, exp(x - max) with a fused sum, reciprocal, scale."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=t, axis=1, negate=True)
        e = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=row_max, reduce_op=nl.add,
                        reduce_res=total)
        inv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv, data=total)
        r = nl.ndarray((P, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=e, op0=nl.multiply, operand0=inv)
        nl.store(out[i * P:(i + 1) * P, :], value=r)
    return out


@nki.jit
def rmsnorm(x, w):
    """x / sqrt(mean(x^2) + 1e-6) * w, w broadcast over rows."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    w_row = nl.load(w.reshape((1, n)))
    w_tile = nl.broadcast_to(w_row, (P, n))
    for i in nl.affine_range(m // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        sq = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=t, reduce_op=nl.add, reduce_res=ss)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / n,
                           op1=nl.add, operand1=1e-6)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        y = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=rstd)
        r = nl.ndarray((P, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r, data1=y, data2=w_tile, op=nl.multiply)
        nl.store(out[i * P:(i + 1) * P, :], value=r)
    return out


@nki.jit
def layernorm(x, gamma, beta):
    """(x - mean) / sqrt(var + 1e-5) * gamma + beta with bn_stats/bn_aggr (n <= 512)."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma.reshape((1, n))), (P, n))
    b = nl.broadcast_to(nl.load(beta.reshape((1, n))), (P, n))
    for i in nl.affine_range(m // P):
        t = nl.load(x[i * P:(i + 1) * P, :])
        stats = nl.ndarray((P, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=stats, data=t)
        mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=1e-5)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        y = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.subtract, operand0=mv[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        r = nl.add(nl.multiply(y, g), b, dtype=x.dtype)
        nl.store(out[i * P:(i + 1) * P, :], value=r)
    return out


@nki.jit
def matmul(lhs_t, rhs):
    """out[M, N] = lhs_t[K, M].T @ rhs[K, N]; 128-K, 128-M, 512-N tiles, PSUM over K."""
    k, m = lhs_t.shape
    _, n = rhs.shape
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
def transpose(x):
    """out = x.T through the Tensor Engine, 128x128 blocks."""
    m, n = x.shape
    out = nl.ndarray((n, m), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // P):
        for j in nl.affine_range(n // P):
            t = nl.load(x[i * P:(i + 1) * P, j * P:(j + 1) * P])
            tp = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=tp, data=t)
            ts = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=ts, src=tp)
            nl.store(out[j * P:(j + 1) * P, i * P:(i + 1) * P], value=ts)
    return out


@nki.jit
def lnc2_scale(x):
    """out = 2 * x, each logical core (nl.program_id) doing half of the row tiles."""
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    half = m // nl.num_programs(0)
    base = nl.program_id(0) * half
    for i in nl.affine_range(half // P):
        rows = nl.ds(base + i * P, P)
        t = nl.load(x[rows, :])
        nl.store(out[rows, :], value=nl.multiply(t, 2.0))
    return out
