"""Layouts no emitter reads in place (permute, flip, select, expand, a transpose that is
not a matmul operand), copied by DMA: into HBM scratch that the other emitters then read
as a plain tensor, or straight into an output.

A copy whose innermost destination dim is also contiguous in the source is one
HBM -> HBM `dma_copy` through the view's access pattern (runs as long as the source's).
One that moves the source's contiguous dim (a transpose) would read 4-byte runs that
way; it goes through SBUF in [<=128, <=128] blocks instead, each read with contiguous
runs along the source's contiguous dim and turned on the Tensor Engine
(`nisa.nc_transpose`), so both DMAs keep runs of up to 512 bytes.
"""

from __future__ import annotations

import math
from dataclasses import replace

from nkibot.lowering.emit.builder import PMAX, Axis, Block, emit_grid, nl_dtype
from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Leaf
from nkibot.lowering.frontend.strided import Strided
from nkibot.lowering.schedule import copyplan
from nkibot.lowering.schedule.layout import Resolved

FLOATS = ("float32", "bfloat16", "float16")


def emit_scratch(res: Resolved, kernel: Kernel) -> None:
    """Allocate and fill every HBM scratch copy `resolve` asked for, in graph order."""
    for name, view in res.scratch.items():
        leaf = _fresh(res, res.views[name].leaf, kernel)
        assert view.strided is not None
        kernel.body.comment(f"{name}: a {_what(view.strided)} of {view.leaf.name}, copied "
                            "to HBM scratch for the stages that read it")
        kernel.body.line(f"{leaf.name} = nl.ndarray({view.shape!r}, dtype="
                         f"{nl_dtype(leaf.dtype)}, buffer=nl.hbm)")
        emit_copy(kernel, view.leaf.name, view.strided, leaf.name, leaf.dtype)


def _fresh(res: Resolved, leaf: Leaf, kernel: Kernel) -> Leaf:
    """The scratch tensor under a name no other stage of the kernel has used."""
    var = kernel.names.fresh(leaf.name)
    if var == leaf.name:
        return leaf
    new = replace(leaf, name=var)
    for name, view in res.views.items():
        if view.leaf == leaf:
            res.views[name] = replace(view, leaf=new)
    return new


def emit_view_outputs(res: Resolved, outputs: list[Output], kernel: Kernel) -> list[Output]:
    """Copy outputs that are layouts of a kernel argument; returns the other outputs."""
    rest = []
    for out in outputs:
        view = res.views.get(res.target(out.name))
        if view is None or view.strided is None or not (
                view.general or view.transposed or view.leaf.source == "scratch"):
            rest.append(out)
            continue
        kernel.body.comment(f"{out.var}: a {_what(view.strided)} of {view.leaf.name}")
        emit_copy(kernel, view.leaf.name, view.strided, out.var, out.dtype)
    return rest


def _what(view: Strided) -> str:
    if view.contiguous:
        return "copy"
    return "strided view (access pattern " + ", ".join(
        f"[{s}, {n}]" for n, s in view.merged()) + (f", offset {view.offset})" if view.offset
                                                    else ")")


def emit_copy(kernel: Kernel, src: str, view: Strided, dst: str, dtype: str) -> None:
    """dst (contiguous, view.shape) <- the elements of `src` that `view` addresses, by the
    mechanism the cost model ranks fastest (`copyplan.plan`)."""
    dims = view.merged()
    counts = tuple(n for n, _ in dims)
    how = copyplan.plan(dims, copyplan.elem_bytes(dtype), dtype in FLOATS)
    if how.how == "pe":
        _emit_pe_transpose(kernel, src, view, dims, how.inner, dst, dtype)
    elif how.how == "sbuf":
        _emit_sbuf_permute(kernel, src, view, dims, how.chunk, dst, dtype)
    else:
        pattern = "[" + ", ".join(f"[{s}, {n}]" for n, s in dims) + "]"
        kernel.body.line(f"nisa.dma_copy(dst={dst}.reshape({counts!r}), "
                         f"src={src}.ap({pattern}, offset={view.offset}))")


def _emit_sbuf_permute(kernel: Kernel, src: str, view: Strided, dims: list[tuple[int, int]],
                       chunk: int, dst: str, dtype: str) -> None:
    """dims[0] on partitions; per tile, the free dims loaded in the source's memory order
    and reordered into the destination's by one Vector Engine copy."""
    counts = [n for n, _ in dims]
    rest = math.prod(counts[2:])
    d0 = counts[1] * rest
    # tile dims in the source's memory order (largest stride first), so the load's runs
    # are the source's; the copy reads them back in the destination's order
    order = sorted(range(1, len(dims)), key=lambda i: -dims[i][1])
    size = {i: ("c" if i == 1 else str(counts[i])) for i in range(1, len(dims))}
    tile_stride: dict[int, str] = {}
    step = "1"
    for i in reversed(order):
        tile_stride[i] = step
        step = f"{step} * {size[i]}" if step != "1" else size[i]
    fsz = f"c * {rest}" if rest != 1 else "c"
    load = ", ".join(f"[{dims[i][1]}, {size[i]}]" for i in order)
    tiled = ", ".join(f"[{tile_stride[i]}, {size[i]}]" for i in order)
    perm = ", ".join(f"[{tile_stride[i]}, {size[i]}]" for i in range(1, len(dims)))
    fn = kernel.names.fresh("permute_block")
    kernel.helpers.append([
        f"def {fn}(src, dst, so, p0, p, c0, c):",
        '    """dst rows [p0:p0+p], dim-1 slab [c0:c0+c] <- the same elements of src, read in '
        "its memory order and reordered on the Vector Engine.\"\"\"",
        f"    t = nl.ndarray((p, {fsz}), dtype={nl_dtype(dtype)}, buffer=nl.sbuf)",
        f"    nisa.dma_copy(dst=t.ap([[{fsz}, p], {tiled}], offset=0),",
        f"                  src=src.ap([[{dims[0][1]}, p], {load}],",
        f"                         offset=so + p0 * {dims[0][1]} + c0 * {dims[1][1]}))",
        f"    u = nl.ndarray((p, {fsz}), dtype={nl_dtype(dtype)}, buffer=nl.sbuf)",
        f"    nisa.tensor_copy(dst=u, src=t.ap([[{fsz}, p], {perm}], offset=0))",
        f"    nisa.dma_copy(dst=dst.ap([[{d0}, p], [1, {fsz}]], offset=p0 * {d0} + c0 * {rest}),",
        "                  src=u)",
    ])
    vp, vc = kernel.names.fresh("tp"), kernel.names.fresh("tc")
    call = f"{fn}({src}, {dst}, {view.offset}, {{{vp}0}}, {{{vp}sz}}, {{{vc}0}}, {{{vc}sz}})"
    emit_grid(kernel.body, [Axis(vp, counts[0], PMAX), Axis(vc, counts[1], chunk)], call,
              "affine_range")


def _emit_pe_transpose(kernel: Kernel, src: str, view: Strided, dims: list[tuple[int, int]],
                       inner: int, dst: str, dtype: str) -> None:
    """Blocks of (a: the destination's contiguous dim) x (b: the source's) turned on the PE."""
    counts = [n for n, _ in dims]
    dst_strides = [math.prod(counts[i + 1:]) for i in range(len(counts))]
    (n_a, s_a), (n_b, _) = dims[-1], dims[inner]
    d_b = dst_strides[inner]
    fn = kernel.names.fresh("transpose_block")
    kernel.helpers.append([
        f"def {fn}(src, dst, so, do, a0, pa, b0, qb):",
        '    """dst block [b0:b0+qb, a0:a0+pa] <- src block [a0:a0+pa, b0:b0+qb], turned on '
        'the Tensor Engine."""',
        "    t = nl.ndarray((pa, qb), dtype=nl.float32, buffer=nl.sbuf)",
        f"    nisa.dma_copy(dst=t, src=src.ap([[{s_a}, pa], [1, qb]], offset=so + a0 * {s_a}"
        " + b0))",
        "    f = nl.ndarray((qb, pa), dtype=nl.float32, buffer=nl.psum)",
        "    nisa.nc_transpose(f, t)",
        f"    u = nl.ndarray((qb, pa), dtype={nl_dtype(dtype)}, buffer=nl.sbuf)",
        "    nisa.tensor_copy(dst=u, src=f)",
        f"    nisa.dma_copy(dst=dst.ap([[{d_b}, qb], [1, pa]], offset=do + b0 * {d_b} + a0),"
        " src=u)",
    ])
    body: Block = kernel.body
    outer = [i for i in range(len(dims) - 1) if i != inner]
    loops = 0
    so, do = [str(view.offset)], []
    for i in outer:
        var = kernel.names.fresh(f"i{i}")
        body.line(f"for {var} in nl.affine_range({counts[i]}):")
        body.indent()
        loops += 1
        so.append(f"{var} * {dims[i][1]}")
        do.append(f"{var} * {dst_strides[i]}")
    va, vb = kernel.names.fresh("ta"), kernel.names.fresh("tb")
    call = (f"{fn}({src}, {dst}, {' + '.join(so)}, {' + '.join(do) or '0'}, "
            f"{{{va}0}}, {{{va}sz}}, {{{vb}0}}, {{{vb}sz}})")
    emit_grid(body, [Axis(va, n_a, PMAX), Axis(vb, n_b, PMAX)], call, "affine_range")
    for _ in range(loops):
        body.dedent()
