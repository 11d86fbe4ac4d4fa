"""`torch.cat` / `torch.stack` of kernel arguments (or of earlier stages' HBM results): each
part copied by DMA into its slab of the output, through both access patterns.

A part that is itself a layout (a permute, a slice, ...) is read through its own pattern,
so the copy is the only data movement; the output slab of part i along dim d starts at
the sum of the earlier parts' extents times the output's stride of d.
"""

from __future__ import annotations

from nkibot.lowering.emit.rowwise import Kernel, Output
from nkibot.lowering.frontend.ir import Ref
from nkibot.lowering.frontend.strided import Strided, contiguous_strides
from nkibot.lowering.schedule.layout import LayoutError, Resolved


def paired(src: Strided, dst: Strided) -> list[tuple[int, int, int]]:
    """(count, src stride, dst stride) per dim, size-1 dims dropped, and adjacent dims
    merged where both sides run on."""
    dims = [(n, s, d) for n, s, d in zip(src.shape, src.strides, dst.strides, strict=True)
            if n != 1]
    out: list[tuple[int, int, int]] = []
    for n, s, d in dims:
        if out and out[-1][1] == s * n and out[-1][2] == d * n:
            out[-1] = (out[-1][0] * n, s, d)
        else:
            out.append((n, s, d))
    return out or [(1, 1, 1)]


def emit_pair_copy(kernel: Kernel, src: str, src_view: Strided, dst: str,
                   dst_view: Strided) -> None:
    """One HBM -> HBM dma_copy of the elements `src_view` addresses into `dst_view`'s."""
    dims = paired(src_view, dst_view)
    src_pattern = "[" + ", ".join(f"[{s}, {n}]" for n, s, _ in dims) + "]"
    dst_pattern = "[" + ", ".join(f"[{d}, {n}]" for n, _, d in dims) + "]"
    kernel.body.line(f"nisa.dma_copy(dst={dst}.ap({dst_pattern}, offset={dst_view.offset}), "
                     f"src={src}.ap({src_pattern}, offset={src_view.offset}))")


def emit_cat(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    if len(res.ops) != 1 or len(outputs) != 1:
        raise LayoutError("a concatenation with other ops in the group")
    op, out = res.ops[0], outputs[0]
    dim = int(str(op.attr("dim", 0)))
    strides = contiguous_strides(out.shape)
    start = 0
    kernel.body.comment(f"{op.origin}: {len(op.args)} parts copied into their slabs of "
                        f"{out.var} along dim {dim}")
    for arg in op.args:
        if not isinstance(arg, Ref) or res.target(arg.name) not in res.views:
            raise LayoutError("a concatenation of computed values in the same group")
        view = res.views[res.target(arg.name)]
        if view.strided is None:
            raise LayoutError("a concatenation of a layout with no access pattern")
        slab = Strided(view.shape, strides, start * strides[dim])
        emit_pair_copy(kernel, view.leaf.name, view.strided, out.var, slab)
        start += view.shape[dim]
