"""Small kernels for the cost-model tests (our own; imported while our `nki` is active)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmuls(a, b):
    """a [128, 128] (stationary), b [128, 512]: four back-to-back matmuls into one bank."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.affine_range(4):
        nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nl.store(out, value=res)
    return out


@nki.jit
def load_then_add(x):
    """One DMA, then a VectorE op that reads it: the op must wait for the DMA."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=t, op0=nl.add, operand0=1.0)
    nl.store(out, value=r)
    return out


@nki.jit
def independent(x, y):
    """A ScalarE and a VectorE chain on different tiles: they overlap."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    tx = nl.load(x)
    ty = nl.load(y)
    rx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ry = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    for _ in nl.affine_range(8):
        nisa.activation(dst=rx, op=nl.exp, data=tx)
        nisa.tensor_scalar(dst=ry, data=ty, op0=nl.multiply, operand0=2.0)
    nl.store(out, value=rx)
    nl.store(out2, value=ry)
    return out, out2


@nki.jit
def psum_rebind(a, b):
    """Eight PSUM banks allocated in a loop body, rebinding the names every iteration."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sa = nl.load(a)
    sb = nl.load(b)
    for _ in nl.affine_range(3):
        p0 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p2 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p3 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p4 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p5 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p6 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        p7 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for p in (p0, p1, p2, p3, p4, p5, p6, p7):
            nisa.nc_matmul(dst=p, stationary=sa, moving=sb)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=p7)
        nl.store(out, value=res)
    return out


def _window(x, w, trip, loop):
    """The window body both kernels share; `loop` is the range iterator under test."""
    out = nl.ndarray((128, trip), dtype=x.dtype, buffer=nl.shared_hbm)
    tx = nl.load(x)
    tw = nl.load(w)
    res = nl.ndarray((128, trip), dtype=x.dtype, buffer=nl.sbuf)
    for o in loop(trip):
        prod = nl.ndarray((128, 3), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=prod, data1=tx[:, o:o + 3], data2=tw, op=nl.multiply)
        nisa.tensor_reduce(dst=res[:, o:o + 1], op=nl.add, data=prod, axis=[1])
    nl.store(out, value=res)
    return out


@nki.jit
def sliding_window(x, w, trip=64):
    """A 3-tap window per output column: `trip` tiny multiply+reduce pairs in an affine loop
    (the conv1d calibration chain's inner loop); `trip=...` sets the loop length."""
    return _window(x, w, trip, nl.affine_range)


@nki.jit
def sliding_window_sequential(x, w):
    """The same 64-iteration body in a sequential_range: never vectorised."""
    return _window(x, w, 64, nl.sequential_range)


@nki.jit
def late_independent(x, y):
    """A VectorE op on a slow DMA's tile, then one on a tile already loaded: the second
    may run while the first waits (the compiler schedules independent work early)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    ty = nl.load(y)
    rx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ry = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=ry, data=ty, op0=nl.multiply, operand0=2.0)
    tx = nl.load(x)
    nisa.tensor_scalar(dst=rx, data=tx, op0=nl.add, operand0=1.0)
    nisa.tensor_scalar(dst=ry, data=ry, op0=nl.add, operand0=1.0)
    nl.store(out, value=rx)
    nl.store(out2, value=ry)
    return out, out2


@nki.jit
def dead_copy(x, keep_copy=False):
    """out = x + 1; `copy` of the input tile is written and (unless keep_copy) never read."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    copy = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=copy, src=t, engine=nisa.engine.vector)
    src = copy if keep_copy else t
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=src, op0=nl.add, operand0=1.0)
    nl.store(out, value=r)
    return out


def _pair(x, store_result):
    """x * 2 + 1 as two VectorE ops, the second reading what the first wrote; stores the
    result, or (store_result=False) the loaded input, leaving the pair unread."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=a, data=t, op0=nl.multiply, operand0=2.0)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=b, data=a, op0=nl.add, operand0=1.0)
    nl.store(out, value=b if store_result else t)
    return out


@nki.jit
def dead_chain(x):
    """A two-instruction chain whose end result is never read: both are dead."""
    return _pair(x, store_result=False)


@nki.jit
def setitem_then_read(x):
    """`s[...] = t` (no nki call issues it), then an op reading `s`."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    s[...] = t
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=s, op0=nl.add, operand0=1.0)
    nl.store(out, value=r)
    return out


@nki.jit
def register_sum(x):
    """Two exp passes folded in the accumulation registers; only the last writes a result."""
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    d1 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=d1, op=nl.exp, data=t, reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    d2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=d2, op=nl.exp, data=t, reduce_op=nl.add,
                    reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=total)
    nl.store(out, value=total)
    return out


@nki.jit
def dependent_pair(x):
    """Two VectorE ops back to back, the second reading what the first wrote."""
    return _pair(x, store_result=True)


def _add_tiles(a, b, out, cols, cast_copy):
    p = 128
    for i in nl.affine_range(a.shape[0] // p):
        for j in nl.affine_range(a.shape[1] // cols):
            ta = nl.ndarray((p, cols), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((p, cols), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[i * p:(i + 1) * p, j * cols:(j + 1) * cols])
            nisa.dma_copy(dst=tb, src=b[i * p:(i + 1) * p, j * cols:(j + 1) * cols])
            o = nl.ndarray((p, cols), dtype=a.dtype, buffer=nl.sbuf)
            if cast_copy:  # add in fp32, then a cast copy to the output dtype
                s = nl.ndarray((p, cols), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=s, data1=ta, data2=tb, op=nl.add)
                nisa.tensor_copy(dst=o, src=s)
            else:
                nisa.tensor_tensor(dst=o, data1=ta, data2=tb, op=nl.add)
            nisa.dma_copy(dst=out[i * p:(i + 1) * p, j * cols:(j + 1) * cols], src=o)


@nki.jit
def add_tiles(a, b, cols=512, cast_copy=False):
    """Tiled a + b; `cast_copy`: an extra VectorE copy per tile (issue 30, defect 4)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    _add_tiles(a, b, out, cols, cast_copy)
    return out


@nki.jit
def row_scale(x, row, spelling="view"):
    """x * row, the [1, F] row broadcast over the partitions; `spelling`: "view" (the
    tile's .broadcast_to), "nl" (nl.broadcast_to) or "none" (a [P, F] row: no broadcast)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    p, f = x.shape
    r = nl.ndarray((row.shape[0], f), dtype=row.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=row)
    if spelling == "view":
        b = r.broadcast_to((p, f))
    elif spelling == "nl":
        b = nl.broadcast_to(r, shape=(p, f))
    else:
        b = r
    for _ in nl.affine_range(2):  # the broadcast is made once and read twice
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        o = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=t, data2=b, op=nl.multiply)
        nisa.dma_copy(dst=out, src=o)
    return out


@nki.jit
def exp_blocks(inp, inside=True, cols=512):
    """The migration guide's `sb_blocks_migrated` (inside=True: a tile per iteration) and
    `sb_blocks_migrated_incorrect` (one tile for every iteration): load, exp, store."""
    res = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    outer = None if inside else nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(inp.shape[0]):
        buf = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf) if inside else outer
        nisa.dma_copy(dst=buf, src=inp[i])
        nisa.activation(dst=buf, op=nl.exp, data=buf)
        nisa.dma_copy(dst=res[i], src=buf)
    return res


@nki.jit
def hold_then_sum(x, parts=4):
    """Loads `parts` [128, F] slices of x, then adds them up in reverse: with F large, all
    of them live at once exceed SBUF (a compiler spills; run without the capacity check)."""
    out = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(parts):
        t = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        nisa.activation(dst=t, op=nl.exp, data=t)
        tiles.append(t)
    acc = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc, src=tiles[-1])
    for t in reversed(tiles[:-1]):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def sum_as_loaded(x, parts=4, chunks=2):
    """hold_then_sum's result, each slice added as soon as it is loaded, in `chunks`
    column chunks: more instructions, and nothing more than two tiles live."""
    out = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    w = x.shape[2] // chunks
    for c in nl.affine_range(chunks):
        acc = nl.ndarray((128, w), dtype=x.dtype, buffer=nl.sbuf)
        for i in range(parts):
            t = nl.ndarray((128, w), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i, :, c * w:(c + 1) * w])
            nisa.activation(dst=t, op=nl.exp, data=t)
            if i == 0:
                nisa.tensor_copy(dst=acc, src=t)
            else:
                nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[:, c * w:(c + 1) * w], src=acc)
    return out


@nki.jit
def reuse_rows(x, passes=2):
    """Loads every [128, F] slice of x once and adds all of them into one sum, `passes`
    times over: the slices are reused across passes, like a matmul's operand blocks. With
    F large they do not all fit SBUF, and the ones evicted are still copies of x (a
    compiler refills them from x; run without the capacity check)."""
    out = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(x.shape[0]):
        t = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        tiles.append(t)
    acc = nl.ndarray((128, x.shape[2]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for _ in range(passes):
        for t in tiles:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def six_stages(inp, cols=6144):
    """Six equal-size tiles per iteration, each at its own line: their second buffers do
    not all fit SBUF, so the allocator single-buffers some of six tied sites."""
    res = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(inp.shape[0]):
        a = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=inp[i])
        b = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.activation(dst=b, op=nl.exp, data=a)
        c = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.activation(dst=c, op=nl.exp, data=b)
        d = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=c, data2=a, op=nl.add)
        e = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=e, data1=d, data2=b, op=nl.add)
        f = nl.ndarray((128, cols), dtype=inp.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=f, data1=e, data2=c, op=nl.add)
        nisa.dma_copy(dst=res[i], src=f)
    return res


@nki.jit
def interleaved_stores(x, rows=4, same_slice=False):
    """x [64, 4, 126] stored 8 times into row bands of a channel-major [64, 32, 126] output
    (a conv tile's store): each band's byte range overlaps the next one's, its elements do
    not. `same_slice`: every store writes rows 0..rows, a real write-after-write."""
    out = nl.ndarray((64, 8 * rows, 126), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for r in range(8):
        r0 = 0 if same_slice else r * rows
        nl.store(out[0:64, r0:r0 + rows, 0:126], value=t)
    return out


@nki.jit
def add_from(x, y, psum_operand=False):
    """One tensor_tensor add of two [128, F] tiles; the second in PSUM when asked."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    if psum_operand:
        held = nl.ndarray(y.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.activation(dst=held, op=nl.copy, data=b)  # on ScalarE: the add is not dependent
        b = held
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=r, data1=a, data2=b, op=nl.add)
    nl.store(out, value=r)
    return out


@nki.jit
def accumulate_in(x, steps=8, psum_acc=False):
    """Adds `steps` scaled copies of x into one accumulator, kept in SBUF or in PSUM (the
    change autocomp's mamba chain made from step 3 to 4, measured 538 -> 435 µs)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    acc = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.psum if psum_acc else nl.sbuf)
    for i in nl.sequential_range(steps):
        term = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=term, op=nl.copy, data=t, scale=float(i + 1))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=term, op=nl.add)
    res = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nl.store(out, value=res)
    return out
