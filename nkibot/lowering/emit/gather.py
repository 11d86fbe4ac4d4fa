"""`nn.Embedding` / `F.embedding` / `index_select(table, 0, ids)`: rows of a table chosen
at run time, as an indirect DMA gather.

Up to 128 ids a tile: the ids land on the partitions as an [n, 1] int32 tile, and one
`nisa.dma_copy` reads row ids[i] of the table into partition i through the table's
access pattern with that vector offset (`table.ap([[D, n], [1, w]], offset=c0,
vector_offset=ids, indirect_dim=0)`, nki/deep-dives/nki-aps.rst); the rows are stored
contiguously. Rows wider than 4096 elements go in column windows (16 KiB of fp32 per
partition). An id outside the table is an error, as in PyTorch.
"""

from __future__ import annotations

import math

from nkibot.lowering.emit.builder import PMAX, Axis, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Ref
from nkibot.lowering.schedule.layout import LayoutError, Resolved

COLS = 4096  # row window per DMA: 16 KiB of fp32 per partition


def _leaf(res: Resolved, arg: object, what: str) -> tuple[str, tuple[int, ...], str]:
    if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
        raise LayoutError(f"a gather whose {what} is computed; only kernel arguments are read")
    view = res.views[res.target(arg.name)]
    if view.transposed or view.sliced or view.general or view.strided is None or not (
            view.strided.contiguous):
        raise LayoutError(f"a gather whose {what} is a view of an input")
    return view.leaf.name, view.shape, view.leaf.dtype


def emit_gather(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1:
        raise LayoutError("a gather with other ops in the group")
    op = res.ops[0]
    table, (rows, width), dtype = _leaf(res, op.args[0], "table")
    ids, id_shape, id_dtype = _leaf(res, op.args[1], "index")
    if id_dtype not in ("int64", "int32"):
        raise LayoutError(f"gather indices of dtype {id_dtype}")
    n = math.prod(id_shape)
    out = outputs[0]
    cols = min(width, COLS)
    fn = kernel.names.fresh("gather_rows")
    kernel.helpers.append([
        f"def {fn}({table}, ids_v, out_v, i0, n, c0, w):",
        '    """Rows ids[i0:i0+n] of the table, columns c0..c0+w, gathered by one DMA."""',
        "    idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)",
        "    nisa.dma_copy(dst=idx, src=ids_v[nl.ds(i0, n), 0:1])",
        f"    rows = nl.ndarray((n, w), dtype={nl_dtype(dtype)}, buffer=nl.sbuf)",
        f"    nisa.dma_copy(dst=rows, src={table}.ap([[{width}, n], [1, w]], offset=c0, "
        "vector_offset=idx, indirect_dim=0))",
        "    nisa.dma_copy(dst=out_v[nl.ds(i0, n), nl.ds(c0, w)], src=rows)",
    ])
    body = kernel.body
    body.comment(f"{op.origin}: {n} rows of the [{rows}, {width}] table, gathered by index")
    ids_v, out_v = kernel.names.fresh("ids_v"), kernel.names.fresh("out_v")
    body.line(f"{ids_v} = {ids}.reshape(({n}, 1))")
    body.line(f"{out_v} = {out.var}.reshape(({n}, {width}))")
    va, vc = kernel.names.fresh("gi"), kernel.names.fresh("gc")
    emit_grid(body, [Axis(va, n, PMAX), Axis(vc, width, cols)],
              f"{fn}({table}, {ids_v}, {out_v}, {{{va}0}}, {{{va}sz}}, {{{vc}0}}, {{{vc}sz}})",
              "affine_range")
