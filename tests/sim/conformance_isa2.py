"""Conformance kernels for the instruction families added for the whole nki.isa API.

Our own kernels, written the way the official examples use each API (HBM -> SBUF with
dma_copy, one instruction, SBUF -> HBM), so the NumPy drivers in test_sim_isa_extended.py
check each instruction's documented semantics. Import with `nki` resolving to the
backend under test.
"""

import nki
import nki.isa as nisa
import nki.language as nl


def _load(x, dtype=None):
    t = nl.ndarray(x.shape, dtype=x.dtype if dtype is None else dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def scan_kernel(a, b):
    """result[:, i] = result[:, i-1] * a[:, i] + b[:, i], starting from 0 (a linear scan)."""
    x, y = _load(a), _load(b)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=r, data0=x, data1=y, initial=0.0, op0=nl.multiply, op1=nl.add)
    return _out(r)


@nki.jit
def cumsum_kernel(a):
    """Running sum along the free axis of (a * 2)."""
    x = _load(a)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=r, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0)
    return _out(r)


@nki.jit
def scalar_tensor_tensor_kernel(a, b):
    """(a - 1) * b."""
    x, y = _load(a), _load(b)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=r, data=x, op0=nl.subtract, operand0=1.0, op1=nl.multiply,
                              operand1=y)
    return _out(r)


@nki.jit
def tensor_scalar_reduce_kernel(a):
    """(a + 3) and its row max."""
    x = _load(a)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=r, data=x, op0=nl.add, operand0=3.0, reduce_op=nl.maximum,
                              reduce_res=m)
    return _out(r), _out(m)


@nki.jit
def partition_reduce_kernel(a):
    """Sum over the partition axis: [P, N] -> [1, N]."""
    x = _load(a)
    r = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=r, op=nl.add, data=x)
    return _out(r)


@nki.jit
def select_reduce_kernel(pred, a):
    """where(pred, a, -1) and its row max."""
    p, x = _load(pred), _load(a)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=r, predicate=p, on_true=x, on_false=-1.0, reduce_res=m,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum)
    return _out(r), _out(m)


@nki.jit
def range_select_kernel(a, lo, hi):
    """Keep columns lo <= j < hi per row (else FP32_MIN), plus the row max (Trn2+)."""
    x, b0, b1 = _load(a), _load(lo), _load(hi)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=r, on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less,
                      bound0=b0, bound1=b1, reduce_res=m, reduce_op=nl.maximum,
                      range_start=0)
    return _out(r), _out(m)


@nki.jit
def max8_index_kernel(a):
    """The 8 largest values per row, their indices, and the row with them replaced by 0."""
    x = _load(a)
    top = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=x)
    idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=x, vals=top)
    rep = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=rep, data=x, vals=top, imm=0.0)
    return _out(top), _out(idx), _out(rep)


@nki.jit
def n_gather_kernel(a, idx):
    """Per partition: out[p, j] = a[p, idx[p, j]]."""
    x, i = _load(a), _load(idx)
    r = nl.ndarray(idx.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=r, data=x, indices=i)
    return _out(r)


@nki.jit
def shuffle_kernel(a):
    """Reverse the partitions inside each 32-partition quadrant."""
    x = _load(a)
    r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(dst=r, src=x, shuffle_mask=[31 - i for i in range(32)])
    return _out(r)


@nki.jit
def dma_transpose_kernel(a):
    """[16, N] bf16 -> [N, 16] by DMA."""
    x = _load(a)
    r = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=r, src=x)
    return _out(r)


@nki.jit
def gather_rows_kernel(table, rows):
    """out[p, :] = table[rows[p], :] with an indirect (vector_offset) DMA."""
    idx = _load(rows)
    t = nl.ndarray((rows.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.ap([[table.shape[1], rows.shape[0]], [1, table.shape[1]]],
                                      vector_offset=idx, indirect_dim=0))
    return _out(t)


@nki.jit
def scatter_add_kernel(table, rows, values):
    """table[rows[p], :] += values[p, :] with dma_compute (a scatter read-modify-write)."""
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table)
    idx, v = _load(rows), _load(values)
    view = out.ap([[table.shape[1], rows.shape[0]], [1, table.shape[1]]], vector_offset=idx,
                  indirect_dim=0)
    nisa.dma_compute(dst=view, srcs=[view, v], reduce_op=nl.add)
    return out


@nki.jit
def dynamic_row_kernel(a, where):
    """Copy row `where[0, 0]` of a, read at run time through a register and select()."""
    w = _load(where)
    reg = nisa.register_alloc()
    nisa.register_load(reg, w)
    t = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a.ap([[a.shape[1], 1], [1, a.shape[1]]], scalar_offset=reg,
                                  indirect_dim=0))
    u = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=a.select(0, w).reshape((1, a.shape[1])))
    return _out(t), _out(u)


@nki.jit
def fori_sum_kernel(a, n):
    """acc = sum of the first n[0, 0] rows of a, with nl.fori_loop over a register bound."""
    bound = _load(n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, bound)
    acc = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    row = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=a.ap([[a.shape[1], 1], [1, a.shape[1]]], scalar_offset=i,
                                        indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)

    nl.fori_loop(0, reg, body)
    return _out(acc)


@nki.jit
def while_count_kernel(count):
    """Add 1.5 to acc count[0, 0] times with nl.while_loop on a register condition."""
    c = _load(count)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    reg = nisa.register_alloc()
    nisa.register_load(reg, c)

    def body(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.5)
        nisa.tensor_tensor(dst=c, data1=c, data2=one, op=nl.subtract)
        nisa.register_load(r, c)
        return r

    nl.while_loop(reg, body)
    return _out(acc)


@nki.jit
def rng_kernel(seed_value):
    """Two draws after the same seed, and dropout of ones with probability 0.5."""
    seed = _load(seed_value)
    a = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
    b = nl.ndarray((128, 64), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.set_rng_seed(src_seeds=seed)
    nisa.rng(dst=a)
    nisa.set_rng_seed(src_seeds=seed)
    nisa.rng(dst=b)
    ones = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    d = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dropout(dst=d, data=ones, prob=0.5)
    return _out(a), _out(b), _out(d)


@nki.jit
def activate2_kernel(a):
    """relu(a * 2 - 1) and its row sum (Trn3)."""
    x = _load(a)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=r, op=nl.relu, data=x, imm0=2.0, imm1=1.0, op0=nl.multiply,
                   op1=nl.subtract, reduce_op=nl.add, reduce_res=s,
                   reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _out(r), _out(s)


@nki.jit
def mx_matmul_kernel(a_t, b):
    """Quantize a_t [K, M] and b [K, N] (bf16) to MXFP8 and multiply them (Trn3)."""
    k, m = a_t.shape
    n = b.shape[1]
    a_sb, b_sb = _load(a_t), _load(b)
    qa = nl.ndarray((k, m // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    sa = nl.ndarray((k, m // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qa, src=a_sb, dst_scale=sa)
    qb = nl.ndarray((k, n // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    sb = nl.ndarray((k, n // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qb, src=b_sb, dst_scale=sb)
    acc = nl.ndarray((m // 4, n // 4), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)
    r = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=acc)
    return _out(r)


@nki.jit
def mx_packed_scales_kernel(a_t, b):
    """As mx_matmul_kernel, with both scale sets packed in one tile: a's at quadrant
    offset 0, b's at offset 8 (Trn3)."""
    k, m = a_t.shape
    n = b.shape[1]
    a_sb, b_sb = _load(a_t), _load(b)
    scales = nl.ndarray((k, n // 4), dtype=nl.uint8, buffer=nl.sbuf)
    sa, sb = scales[0:, :m // 4], scales[8:, :]
    qa = nl.ndarray((k, m // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qa, src=a_sb, dst_scale=sa)
    qb = nl.ndarray((k, n // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qb, src=b_sb, dst_scale=sb)
    acc = nl.ndarray((m // 4, n // 4), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)
    r = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=acc)
    return _out(r)
