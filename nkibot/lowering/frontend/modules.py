"""nn.Module calls -> the functional op they compute, with their parameters as leaves."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from nkibot.lowering.frontend.ir import Ref

Call = tuple[str, list[Any], dict[str, Any]]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _param(state: dict[str, str], target: str, attr: str) -> Ref | None:
    key = f"{target}.{attr}" if target else attr
    return Ref(state[key]) if key in state else None


def _simple(name: str, *attrs: str) -> Callable[..., Call]:
    def call(m: torch.nn.Module, target: str, args: list[Any], state: dict[str, str]) -> Call:
        return name, args, {a: getattr(m, a) for a in attrs}
    return call


def _linear(m: torch.nn.Module, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "linear", [args[0], _param(state, target, "weight"), _param(state, target, "bias")], {}


def _layer_norm(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "layer_norm", [args[0], m.normalized_shape, _param(state, target, "weight"),
                          _param(state, target, "bias"), m.eps], {}


def _rms_norm(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "rms_norm", [args[0], m.normalized_shape, _param(state, target, "weight"),
                        m.eps], {}


def _batch_norm(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    training = m.training or m.running_mean is None
    return "batch_norm", [args[0], _param(state, target, "running_mean"),
                          _param(state, target, "running_var"), _param(state, target, "weight"),
                          _param(state, target, "bias"), training, m.momentum, m.eps], {}


def _instance_norm(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "instance_norm", [args[0], None, None, _param(state, target, "weight"),
                             _param(state, target, "bias"), True, 0.0, m.eps], {}


def _group_norm(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "group_norm", [args[0], m.num_groups, _param(state, target, "weight"),
                          _param(state, target, "bias"), m.eps], {}


def _conv(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    transposed = bool(getattr(m, "transposed", False))
    if getattr(m, "padding_mode", "zeros") != "zeros":
        return f"conv_padding_{m.padding_mode}", args, {}
    extra = {"stride": tuple(m.stride), "padding": m.padding, "dilation": tuple(m.dilation),
             "groups": m.groups, "transposed": transposed,
             "output_padding": tuple(getattr(m, "output_padding", ()) or ())}
    return "convolution", [args[0], _param(state, target, "weight"),
                           _param(state, target, "bias")], extra


def _max_pool(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    n = type(m).__name__[-2]
    return f"max_pool{n}d", [args[0], m.kernel_size, m.stride, m.padding, m.dilation,
                             m.ceil_mode, m.return_indices], {}


def _avg_pool(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    n = type(m).__name__[-2]
    return f"avg_pool{n}d", [args[0], m.kernel_size, m.stride, m.padding, m.ceil_mode,
                             m.count_include_pad, getattr(m, "divisor_override", None)], {}


def _dropout(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    if m.training and m.p > 0:
        return "dropout_training", args, {}
    return "dropout", [args[0], m.p, False], {}


def _adaptive_pool(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    name = type(m).__name__  # AdaptiveAvgPool2d -> adaptive_avg_pool2d
    kind = "avg" if "Avg" in name else "max"
    return f"adaptive_{kind}_pool{name[-2]}d", [args[0], m.output_size,
                                                 getattr(m, "return_indices", False)], {}


def _embedding(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "embedding", [args[0], _param(state, target, "weight"), m.padding_idx,
                         m.max_norm], {}


def _flatten(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "flatten", args, {}


def _norm_spec(m: Any, target: str, state: dict[str, str]) -> dict[str, object] | None:
    if m is None:
        return None
    if not isinstance(m, torch.nn.LayerNorm):
        return {"kind": type(m).__name__}
    return {"kind": "LayerNorm", "shape": tuple(m.normalized_shape), "eps": m.eps,
            "weight": _param(state, target, "weight"), "bias": _param(state, target, "bias")}


def _mha_spec(m: Any, target: str, state: dict[str, str]) -> dict[str, object]:
    """nn.MultiheadAttention's parameters (Refs) and settings, as plain data."""
    out = f"{target}.out_proj" if target else "out_proj"
    return {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "batch_first": m.batch_first,
            "dropout": m.dropout if m.training else 0.0,
            "extra_kv": m.bias_k is not None or m.add_zero_attn,
            **{name: _param(state, target, name) for name in (
                "in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
                "v_proj_weight")},
            "out_weight": _param(state, out, "weight"), "out_bias": _param(state, out, "bias")}


def _mha(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "multihead_attention", args, {"__spec": _mha_spec(m, target, state)}


def _activation(fn: object) -> str:
    """relu / gelu / gelu_tanh, or the activation's name (declined by the handler)."""
    if fn is torch.nn.functional.relu or isinstance(fn, torch.nn.ReLU):
        return "relu"
    if fn is torch.nn.functional.gelu:
        return "gelu"
    if isinstance(fn, torch.nn.GELU):
        return "gelu_tanh" if fn.approximate == "tanh" else "gelu"
    return getattr(fn, "__name__", type(fn).__name__)


def _layer_spec(m: Any, target: str, state: dict[str, str]) -> dict[str, object]:
    """nn.TransformerEncoderLayer as data: its attention, feed-forward and norms."""
    def sub(name: str) -> str:
        return f"{target}.{name}" if target else name
    dropouts = (m.dropout, m.dropout1, m.dropout2)
    return {"self_attn": _mha_spec(m.self_attn, sub("self_attn"), state),
            "norm_first": m.norm_first, "activation": _activation(m.activation),
            "dropout": max((d.p for d in dropouts if d.training), default=0.0),
            "linear1": (_param(state, sub("linear1"), "weight"),
                        _param(state, sub("linear1"), "bias")),
            "linear2": (_param(state, sub("linear2"), "weight"),
                        _param(state, sub("linear2"), "bias")),
            "norm1": _norm_spec(m.norm1, sub("norm1"), state),
            "norm2": _norm_spec(m.norm2, sub("norm2"), state)}


def _encoder_layer(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    return "transformer_encoder_layer", args, {"__spec": _layer_spec(m, target, state)}


def _encoder(m: Any, target: str, args: list[Any], state: dict[str, str]) -> Call:
    prefix = f"{target}." if target else ""
    layers = [_layer_spec(layer, f"{prefix}layers.{i}", state)
              for i, layer in enumerate(m.layers)]
    return "transformer_encoder", args, {"__spec": {
        "layers": layers, "norm": _norm_spec(m.norm, f"{prefix}norm", state)}}


_MODULES: dict[str, Callable[..., Call]] = {
    "Linear": _linear, "LayerNorm": _layer_norm, "RMSNorm": _rms_norm,
    "BatchNorm1d": _batch_norm, "BatchNorm2d": _batch_norm, "BatchNorm3d": _batch_norm,
    "InstanceNorm1d": _instance_norm, "InstanceNorm2d": _instance_norm,
    "InstanceNorm3d": _instance_norm, "GroupNorm": _group_norm,
    "Conv1d": _conv, "Conv2d": _conv, "Conv3d": _conv, "ConvTranspose1d": _conv,
    "ConvTranspose2d": _conv, "ConvTranspose3d": _conv,
    "MaxPool1d": _max_pool, "MaxPool2d": _max_pool, "MaxPool3d": _max_pool,
    "AvgPool1d": _avg_pool, "AvgPool2d": _avg_pool, "AvgPool3d": _avg_pool,
    **{f"Adaptive{k}Pool{n}d": _adaptive_pool for k in ("Avg", "Max") for n in (1, 2, 3)},
    "Embedding": _embedding, "MultiheadAttention": _mha,
    "TransformerEncoderLayer": _encoder_layer, "TransformerEncoder": _encoder,
    "Dropout": _dropout, "Flatten": _flatten,
    "Identity": _simple("identity"),
    "ReLU": _simple("relu"), "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"),
    "GELU": _simple("gelu", "approximate"), "SiLU": _simple("silu"), "Mish": _simple("mish"),
    "Softplus": _simple("softplus", "beta", "threshold"), "Softsign": _simple("softsign"),
    "ELU": _simple("elu", "alpha"), "SELU": _simple("selu"), "CELU": _simple("celu", "alpha"),
    "Hardsigmoid": _simple("hardsigmoid"), "Hardswish": _simple("hardswish"),
    "Hardtanh": _simple("hardtanh", "min_val", "max_val"), "ReLU6": _simple("relu6"),
    "LeakyReLU": _simple("leaky_relu", "negative_slope"), "LogSigmoid": _simple("logsigmoid"),
    "Softmax": _simple("softmax", "dim"), "LogSoftmax": _simple("log_softmax", "dim"),
    "MSELoss": _simple("mse_loss", "reduction"), "L1Loss": _simple("l1_loss", "reduction"),
    "SmoothL1Loss": _simple("smooth_l1_loss", "reduction", "beta"),
    "HuberLoss": _simple("huber_loss", "reduction", "delta"),
    "KLDivLoss": _simple("kl_div", "reduction", "log_target"),
    "CosineSimilarity": _simple("cosine_similarity", "dim", "eps"),
    "TripletMarginLoss": _simple("triplet_margin_loss", "margin", "p", "eps", "swap",
                                 "reduction"),
}


def module_call(module: torch.nn.Module, target: str, args: list[Any], kwargs: dict[str, Any],
                state: dict[str, str]) -> Call:
    """(handler name, args, kwargs) for a call_module node; unknown modules keep their name."""
    build = _MODULES.get(type(module).__name__)
    if build is None:
        return _snake(type(module).__name__), args, kwargs
    name, new_args, extra = build(module, target, args, state)
    return name, new_args, {**kwargs, **extra}
