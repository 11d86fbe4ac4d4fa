"""torch convolutions and pooling -> the `conv` and `pool` primitives (modules and F.*)."""

from __future__ import annotations

from nkibot.lowering.frontend.decompose import (
    HANDLERS,
    Handler,
    get,
    out_shape,
    register,
    tensor,
)
from nkibot.lowering.frontend.ir import Arg
from nkibot.lowering.frontend.sink import Sink, Unsupported


def _padding(value: object, w_shape: tuple[int, ...], dilation: tuple[int, ...]) -> object:
    """'valid' -> 0; 'same' -> (K - 1) * dilation / 2 per dim when that is symmetric."""
    if value == "valid":
        return 0
    if value == "same":
        pads = []
        for k, d in zip(w_shape[2:], dilation, strict=True):
            if ((k - 1) * d) % 2:
                raise Unsupported("aten.convolution.default", "asymmetric 'same' padding")
            pads.append((k - 1) * d // 2)
        return tuple(pads)
    return value


def _tuple(value: object, n: int) -> tuple[int, ...]:
    items = value if isinstance(value, tuple | list) else (value,) * n
    return tuple(int(str(v)) for v in items)


def conv(s: Sink, x: Arg, w: Arg, b: object, k: dict[str, object], *, stride: object,
         padding: object, dilation: object, groups: object, transposed: bool) -> object:
    n = len(s.shape(x)) - 2
    if n not in (1, 2, 3) or len(s.shape(w)) != n + 2:
        raise Unsupported("aten.convolution.default", "only 1-D, 2-D and 3-D convolutions")
    dil = _tuple(dilation, n)
    pad = _tuple(_padding(padding, s.shape(w), dil), n)
    args: tuple[Arg, ...] = (x, w) if b is None else (x, w, tensor(b))
    return s.emit("conv", *args, shape=out_shape(k), last=True, stride=_tuple(stride, n),
                  padding=pad, dilation=dil, groups=int(str(groups)), transposed=transposed)


@register("convolution")
def _convolution(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return conv(s, tensor(a[0]), tensor(a[1]), a[2], k, stride=k["stride"],
                padding=k["padding"], dilation=k["dilation"], groups=k["groups"],
                transposed=bool(k["transposed"]))


@register("conv1d", "conv2d", "conv3d")
def _conv_nd(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return conv(s, tensor(a[0]), tensor(get(a, k, 1, "weight")), get(a, k, 2, "bias"), k,
                stride=get(a, k, 3, "stride", 1), padding=get(a, k, 4, "padding", 0),
                dilation=get(a, k, 5, "dilation", 1), groups=get(a, k, 6, "groups", 1),
                transposed=False)


@register("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_transpose_nd(s: Sink, a: list[object], k: dict[str, object]) -> object:
    return conv(s, tensor(a[0]), tensor(get(a, k, 1, "weight")), get(a, k, 2, "bias"), k,
                stride=get(a, k, 3, "stride", 1), padding=get(a, k, 4, "padding", 0),
                dilation=get(a, k, 7, "dilation", 1), groups=get(a, k, 6, "groups", 1),
                transposed=True)


def pool(s: Sink, x: Arg, kind: str, n: int, k: dict[str, object], *, kernel: object,
         stride: object, padding: object, dilation: object = 1, count_include_pad: bool = True,
         divisor: object = None, return_indices: bool = False) -> object:
    if len(s.shape(x)) != n + 2:
        raise Unsupported(f"aten.{kind}_pool{n}d.default", "needs [N, C, *spatial] input")
    if return_indices:
        raise Unsupported(f"aten.max_pool{n}d_with_indices.default", "pooling indices")
    if kind == "avg" and not count_include_pad and _tuple(padding, n) != (0,) * n:
        raise Unsupported(f"aten.avg_pool{n}d.default", "count_include_pad=False with padding")
    stride = kernel if stride is None or stride == [] or stride == () else stride
    return s.emit("pool", x, shape=out_shape(k), last=True, kind=kind, kernel=_tuple(kernel, n),
                  stride=_tuple(stride, n), padding=_tuple(padding, n),
                  dilation=_tuple(dilation, n), divisor=divisor)


def _max_pool(n: int) -> Handler:
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        return pool(s, tensor(a[0]), "max", n, k, kernel=get(a, k, 1, "kernel_size"),
                    stride=get(a, k, 2, "stride"), padding=get(a, k, 3, "padding", 0),
                    dilation=get(a, k, 4, "dilation", 1),
                    return_indices=bool(get(a, k, 6, "return_indices", False)))
    return handle


def _avg_pool(n: int) -> Handler:
    def handle(s: Sink, a: list[object], k: dict[str, object]) -> object:
        return pool(s, tensor(a[0]), "avg", n, k, kernel=get(a, k, 1, "kernel_size"),
                    stride=get(a, k, 2, "stride"), padding=get(a, k, 3, "padding", 0),
                    count_include_pad=bool(get(a, k, 5, "count_include_pad", True)),
                    divisor=get(a, k, 6, "divisor_override"))
    return handle


for _n in (1, 2, 3):
    HANDLERS[f"max_pool{_n}d"] = _max_pool(_n)
    HANDLERS[f"avg_pool{_n}d"] = _avg_pool(_n)
