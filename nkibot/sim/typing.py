"""`nki.typing`: the annotation types kernels write, e.g. `t: tensor[128, 512] = nl.load(x)`.

Annotations carry no behaviour in the simulator (nor do they change what NKI computes);
`tensor[...]` just has to be subscriptable and printable.
"""

from __future__ import annotations

from typing import Any

__nkibot_sim__ = True


class _TensorType:
    """`tensor[shape..., dtype]`: an annotation that records what it was given."""

    def __init__(self, params: tuple[Any, ...]) -> None:
        self.params = params

    def __repr__(self) -> str:
        return "tensor[" + ", ".join(map(repr, self.params)) + "]"


class tensor:
    """Subscript with a shape (and optionally a dtype): `tensor[128, 512]`."""

    def __class_getitem__(cls, params: Any) -> _TensorType:
        return _TensorType(params if isinstance(params, tuple) else (params,))


mutable_tensor = tensor
scalar = int

__all__ = ["mutable_tensor", "scalar", "tensor"]
