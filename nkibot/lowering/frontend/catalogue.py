"""The one catalogue of operators the lowering covers.

Every op module registers its handlers into `decompose.HANDLERS` when it is imported, so
the set depended on which modules a process happened to have imported: a fresh
interpreter that imported only some of them answered that conv2d, cumsum or attention
were not covered. This module imports every op module once; the tracer, discovery's
static estimate (`convert.staticops`), the dashboard (through discovery), the decline
messages and docs/lowering.md all read it. It imports no torch, so the webhook service
can ask it.

`python -m nkibot.lowering.frontend.catalogue` prints the catalogue (the list in
docs/lowering.md is that output; a test keeps them equal).
"""

from __future__ import annotations

import sys

from nkibot.lowering.frontend import (  # noqa: F401 - each registers its handlers
    attnops,
    composite,
    convops,
    decompose,
    layoutops,
    losses,
    reductions,
    scanops,
    selectops,
    transformer,
)
from nkibot.lowering.frontend.decompose import HANDLERS, Handler

#: nn.Module types the lowering maps to an op (`modules.py`, which imports torch, holds the
#: mapping; a test keeps the two equal).
LOWERED_MODULES: frozenset[str] = frozenset({
    "Linear", "LayerNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "GroupNorm", "Dropout", "Flatten",
    "Identity", "ReLU", "Sigmoid", "Tanh", "GELU", "SiLU", "Mish", "Softplus", "Softsign",
    "ELU", "SELU", "CELU", "Hardsigmoid", "Hardswish", "Hardtanh", "ReLU6", "LeakyReLU",
    "LogSigmoid", "Softmax", "LogSoftmax", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
    "KLDivLoss", "CosineSimilarity", "TripletMarginLoss",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Embedding", "MultiheadAttention",
    "TransformerEncoderLayer", "TransformerEncoder",
})
#: Handler names that are the tracer's own spellings, not torch ops a user writes.
_INTERNAL = frozenset({"subscript", "einsum_mm", "expand_as_view", "identity",
                       "multihead_attention", "transformer_encoder_layer",
                       "transformer_encoder"})

#: torch function / method / operator names with a handler (trace.op_name spellings).
TORCH_OPS: frozenset[str] = frozenset(HANDLERS) - _INTERNAL


def handler(name: str) -> Handler | None:
    """The handler that lowers torch op `name`, or None."""
    return HANDLERS.get(name)


def covered(op: str) -> bool:
    """True when the lowering has a handler for `op` (a torch op name or nn.Module type)."""
    return op in TORCH_OPS or op in LOWERED_MODULES


def listing() -> str:
    """The catalogue as docs/lowering.md shows it: modules, then torch ops, sorted."""
    return "\n".join([
        f"nn.Module types ({len(LOWERED_MODULES)}): {', '.join(sorted(LOWERED_MODULES))}",
        f"torch ops ({len(TORCH_OPS)}): {', '.join(sorted(TORCH_OPS))}",
    ])


def hint() -> str:
    """What a decline for unsupported ops tells the user about the rest."""
    return (f"the lowering covers {len(TORCH_OPS)} torch ops and {len(LOWERED_MODULES)} "
            "nn.Module types (list: python -m nkibot.lowering.frontend.catalogue); "
            "rewrite the listed ops with covered ones, or convert with a model")


if __name__ == "__main__":
    sys.stdout.write(listing() + "\n")
