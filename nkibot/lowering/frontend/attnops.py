"""F.scaled_dot_product_attention -> the `attention` primitive (emitted by `attention.py`).

softmax(Q K^T * scale) V with PyTorch's defaults: scale 1/sqrt(E) unless given, no
dropout. `is_causal=True` is the top-left aligned lower triangle PyTorch builds (key j
attends query i when j <= i), an attribute of the primitive the emitter applies per tile.
`attn_mask`, dropout and grouped-query attention are declined with the reason named.
"""

from __future__ import annotations

import math

from nkibot.lowering.frontend.decompose import get, out_shape, register, tensor
from nkibot.lowering.frontend.sink import Sink, Unsupported

OP = "aten.scaled_dot_product_attention.default"


@register("scaled_dot_product_attention")
def _sdpa(s: Sink, a: list[object], k: dict[str, object]) -> object:
    q, key, v = tensor(a[0]), tensor(get(a, k, 1, "key")), tensor(get(a, k, 2, "value"))
    if get(a, k, 3, "attn_mask") is not None:
        raise Unsupported(OP, "an attn_mask")
    if float(str(get(a, k, 4, "dropout_p", 0.0))) != 0.0:
        raise Unsupported(OP, "dropout_p > 0")
    causal = bool(get(a, k, 5, "is_causal", False))
    if get(a, k, 7, "enable_gqa", False):
        raise Unsupported(OP, "grouped-query attention (enable_gqa)")
    qs, ks, vs = s.shape(q), s.shape(key), s.shape(v)
    if len(qs) < 2 or qs[:-2] != ks[:-2] or ks[:-1] != vs[:-1] or qs[-1] != ks[-1]:
        raise Unsupported(OP, f"query/key/value shapes {qs}, {ks}, {vs} (broadcast batch "
                              "dims are not lowered)")
    scale = get(a, k, 6, "scale")
    value = 1.0 / math.sqrt(qs[-1]) if scale is None else float(str(scale))
    if value <= 0.0:
        raise Unsupported(OP, f"a non-positive scale ({value})")
    if causal:
        return s.emit("attention", q, key, v, shape=out_shape(k), last=True, scale=value,
                      causal=True)
    return s.emit("attention", q, key, v, shape=out_shape(k), last=True, scale=value)
