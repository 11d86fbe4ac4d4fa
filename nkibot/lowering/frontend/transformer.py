"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder -> the ops
they are made of: linear projections, heads by view and permute, the `attention`
primitive (as F.scaled_dot_product_attention lowers), layer norms and the feed-forward.

These modules are lowered from their parameters and settings (`modules.py` reads them
into plain data, the `__spec` keyword) rather than traced into: their forwards branch on
tensor properties (`src.is_nested`, the fast-path checks) that the tracers cannot take.
Eval-mode dropout is the identity; dropout in training, masks other than a causal one,
`add_bias_kv`/`add_zero_attn` and a used `need_weights` output are declined by name.
"""

from __future__ import annotations

import math
from typing import Any

from nkibot.lowering.frontend.decompose import HANDLERS, get, register, tensor
from nkibot.lowering.frontend.ir import Arg
from nkibot.lowering.frontend.layoutops import permuted
from nkibot.lowering.frontend.sink import Sink, Unlowered, Unsupported

MHA = "aten.multihead_attention.default"
LAYER = "aten.transformer_encoder_layer.default"
Spec = dict[str, Any]


def _linear(s: Sink, x: Arg, weight: object, bias: object, last: bool = False) -> Arg:
    shape = (*s.shape(x)[:-1], s.shape(tensor(weight))[0])
    y = s.emit("matmul", x, s.emit("transpose", tensor(weight),
                                   shape=tuple(reversed(s.shape(tensor(weight))))),
               shape=shape, last=last and bias is None)
    return y if bias is None else s.add(y, tensor(bias), last=last)


def _in_proj(s: Sink, spec: Spec, which: int) -> tuple[Arg, Arg | None]:
    """(weight, bias) of the query (0), key (1) or value (2) projection."""
    e = int(spec["embed_dim"])
    packed, bias = spec["in_proj_weight"], spec["in_proj_bias"]
    if packed is not None:
        weight: Arg = s.emit("narrow", packed, shape=(e, s.shape(packed)[1]), dim=0,
                             start=which * e)
    else:
        weight = tensor(spec[("q_proj_weight", "k_proj_weight", "v_proj_weight")[which]])
    if bias is None:
        return weight, None
    return weight, s.emit("slice", bias, shape=(e,), dim=0, start=which * e)


def _mask(mask: object, padding: object, causal: bool, op: str, names: tuple[str, str]
          ) -> bool:
    """Whether the attention is causal; other masks are declined, named as the user
    passed them."""
    if padding is not None:
        raise Unsupported(op, f"the {names[1]} argument (padding masks are not lowered)")
    if mask is not None and not causal:
        raise Unsupported(op, f"the {names[0]} argument (only a causal mask with "
                              "is_causal=True is lowered)")
    return causal


def attention(s: Sink, q: Arg, k: Arg, v: Arg, spec: Spec, causal: bool) -> Arg:
    """nn.MultiheadAttention's output for (query, key, value), the result on `s`."""
    if spec["extra_kv"]:
        raise Unsupported(MHA, "add_bias_kv or add_zero_attn")
    if float(spec["dropout"]) > 0.0:
        raise Unsupported(MHA, "dropout in training mode (call model.eval())")
    batched = len(s.shape(q)) == 3
    first = bool(spec["batch_first"]) and batched
    if not batched:  # (L, E): one sequence, batch 1
        q, k, v = (s.emit("view", t, shape=(s.shape(t)[0], 1, s.shape(t)[1])) for t in (q, k, v))
    heads, e = int(spec["num_heads"]), int(spec["embed_dim"])
    split = (0, 2, 1, 3) if first else (1, 2, 0, 3)  # -> (N, heads, L, head_dim)
    parts = []
    for which, (x, tag) in enumerate(((q, "q"), (k, "k"), (v, "v"))):
        part = s.part(tag)
        y = _linear(part, x, *_in_proj(part, spec, which))
        shape = s.shape(y)
        y = part.emit("view", y, shape=(shape[0], shape[1], heads, e // heads))
        parts.append(permuted(part, y, split))
    n, _, length, head_dim = s.shape(parts[0])
    scale = 1.0 / math.sqrt(head_dim)
    shape = (n, heads, length, head_dim)
    # the causal attribute only where set, as the F.scaled_dot_product_attention lowering
    o = (s.emit("attention", *parts, shape=shape, scale=scale, causal=True) if causal
         else s.emit("attention", *parts, shape=shape, scale=scale))
    merged = permuted(s.part("o"), o, (0, 2, 1, 3) if first else (2, 0, 1, 3))
    o = s.emit("view", merged, shape=(*s.shape(merged)[:2], e))
    if not batched:
        o = s.emit("view", o, shape=(s.shape(o)[0], e))
    return _linear(s, o, spec["out_weight"], spec["out_bias"], last=True)


@register("multihead_attention")
def _mha(s: Sink, a: list[object], k: dict[str, object]) -> object:
    spec: Spec = k["__spec"]  # type: ignore[assignment]
    q, key, v = tensor(a[0]), tensor(get(a, k, 1, "key")), tensor(get(a, k, 2, "value"))
    causal = _mask(get(a, k, 5, "attn_mask"), get(a, k, 3, "key_padding_mask"),
                   bool(get(a, k, 7, "is_causal", False)), MHA,
                   ("attn_mask", "key_padding_mask"))
    out = attention(s, q, key, v, spec, causal)
    if not get(a, k, 4, "need_weights", True):
        return out, None
    return out, Unlowered(MHA, "the attention weights (need_weights=True): pass "
                               "need_weights=False or leave the second output unused")


def _norm(s: Sink, x: Arg, spec: Spec | None) -> Arg:
    """A LayerNorm of x, the result on `s`."""
    if spec is None:
        return x
    if spec["kind"] != "LayerNorm":
        raise Unsupported(LAYER, f"a {spec['kind']} norm (LayerNorm is lowered)")
    y = HANDLERS["layer_norm"](s, [x, spec["shape"], spec["weight"], spec["bias"],
                                        spec["eps"]], {})
    return tensor(y)


def _feed_forward(s: Sink, x: Arg, spec: Spec) -> Arg:
    act = str(spec["activation"])
    if act not in ("relu", "gelu", "gelu_tanh"):
        raise Unsupported(LAYER, f"activation {act} (relu and gelu are lowered)")
    hidden = _linear(s.part("ff1"), x, *spec["linear1"])
    hidden = s.part("act").emit(act, hidden)
    return _linear(s.part("ff2"), hidden, *spec["linear2"])


def encoder_layer(s: Sink, x: Arg, spec: Spec, causal: bool) -> Arg:
    """One nn.TransformerEncoderLayer (post-norm, or pre-norm with norm_first)."""
    if float(spec["dropout"]) > 0.0:
        raise Unsupported(LAYER, "dropout in training mode (call model.eval())")

    def block(tag: str, y: Arg) -> Arg:
        part = s.part(tag)
        if tag == "sa":
            return attention(part, y, y, y, spec["self_attn"], causal)
        return _feed_forward(part, y, spec)

    if spec["norm_first"]:
        h = s.part("res1").add(x, block("sa", _norm(s.part("n1"), x, spec["norm1"])))
        return s.add(h, block("ff", _norm(s.part("n2"), h, spec["norm2"])), last=True)
    h = _norm(s.part("n1"), s.part("res1").add(x, block("sa", x)), spec["norm1"])
    return _norm(s, s.part("res2").add(h, block("ff", h)), spec["norm2"])


def _layer_mask(a: list[object], k: dict[str, object], name: str) -> bool:
    return _mask(get(a, k, 1, name), get(a, k, 2, "src_key_padding_mask"),
                 bool(get(a, k, 3, "is_causal")), LAYER, (name, "src_key_padding_mask"))


@register("transformer_encoder_layer")
def _encoder_layer(s: Sink, a: list[object], k: dict[str, object]) -> object:
    spec: Spec = k["__spec"]  # type: ignore[assignment]
    return encoder_layer(s, tensor(a[0]), spec, _layer_mask(a, k, "src_mask"))


@register("transformer_encoder")
def _encoder(s: Sink, a: list[object], k: dict[str, object]) -> object:
    spec: Spec = k["__spec"]  # type: ignore[assignment]
    causal = _layer_mask(a, k, "mask")
    x, layers, norm = tensor(a[0]), spec["layers"], spec["norm"]
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1 and norm is None
        x = encoder_layer(s if last else s.part(f"layer{i}"), x, layer, causal)
    return x if norm is None else _norm(s, x, norm)
