"""One group -> kernel code: the single-anchor emitter that fits it, or a LayoutError.

A group is a graph with at most one anchor operator (attention, block normalisation,
scan, pooling, convolution, matmul) and its pointwise or row-wise work; with no anchor
it is a middle-dim reduction, a channel norm, or an elementwise/row graph. The
scheduler (`stages.py`) calls this once per stage, and `plan.py` once for a whole graph
that is a single group.
"""

from __future__ import annotations

from nkibot.lowering.emit.attention import emit_attention
from nkibot.lowering.emit.catcopy import emit_cat
from nkibot.lowering.emit.channelnorm import emit_channelnorm
from nkibot.lowering.emit.conv.conv import emit_conv
from nkibot.lowering.emit.gather import emit_gather
from nkibot.lowering.emit.layoutcopy import emit_scratch, emit_view_outputs
from nkibot.lowering.emit.matmul import emit_matmul
from nkibot.lowering.emit.middle import emit_middle
from nkibot.lowering.emit.norm import emit_blocknorm
from nkibot.lowering.emit.pool import emit_pool
from nkibot.lowering.emit.rowwise import Kernel, Output, emit_rowwise
from nkibot.lowering.emit.scan import emit_scan
from nkibot.lowering.schedule.layout import (
    TOTAL,
    LayoutError,
    Placement,
    Resolved,
    candidate_frames,
    place,
)

#: The anchor operators, in the order the emitters are tried: a group holds one of them.
ANCHORS = ("attention", "blocknorm", "scan", "pool", "conv", "matmul", "gather", "cat")


def anchor_of(res: Resolved) -> str:
    """The group's anchor operator, or "rowwise" when it has none."""
    present = {op.op for op in res.ops}
    if "conv" in present and all(op.attr("kind") == "batch" for op in res.ops
                                 if op.op == "blocknorm"):
        return "conv"  # an eval BatchNorm after a conv is folded into its eviction
    return next((a for a in ANCHORS if a in present), "rowwise")


def _place_any(res: Resolved, outputs: list[str]) -> Placement:
    errors = []
    for frame in candidate_frames(res):
        try:
            return place(res, frame, outputs)
        except LayoutError as exc:
            errors.append(str(exc))
    raise LayoutError(errors[0] if errors else "no layout fits this graph")


def emit_group(res: Resolved, outputs: list[Output], kernel: Kernel) -> None:
    """Write the group's code into `kernel`, or raise LayoutError saying why it does not fit."""
    emit_scratch(res, kernel)  # layouts no emitter reads in place: DMA copies first
    outputs = emit_view_outputs(res, outputs, kernel)
    if not outputs:
        return
    anchor = anchor_of(res)
    if anchor == "attention":
        emit_attention(res, outputs, kernel)
    elif anchor == "blocknorm":
        emit_blocknorm(res, outputs, kernel)
    elif anchor == "scan":
        emit_scan(res, outputs, kernel)
    elif anchor == "pool":
        emit_pool(res, outputs, kernel)
    elif anchor == "conv":
        emit_conv(res, outputs, kernel)
    elif anchor == "matmul":
        emit_matmul(res, outputs, kernel)
    elif anchor == "gather":
        emit_gather(res, outputs, kernel)
    elif anchor == "cat":
        emit_cat(res, outputs, kernel)
    elif not emit_middle(res, outputs, kernel) and not emit_channelnorm(res, outputs, kernel):
        pl = _place_any(res, [o.name for o in outputs])
        if any(pl.kinds[res.target(o.name)] not in ("full", "row", TOTAL) for o in outputs):
            raise LayoutError("an output that is a broadcast parameter")
        emit_rowwise(res, pl, outputs, kernel)
