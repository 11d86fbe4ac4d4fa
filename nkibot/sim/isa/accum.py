"""The engines' per-lane accumulation registers, shared by the reducing instructions.

The Vector and Scalar engines each keep one fp32 accumulator per partition lane (128)
that `reduce_cmd` drives: `reset` sets it to the reduce op's identity, `reduce` folds
this instruction's values in, `load_reduce` loads an initial value then folds. The
registers persist across instructions of one launch (nki.isa docs: "The accumulator
registers are shared across Vector Engine accumulation instructions").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkibot.sim import ops
from nkibot.sim.engines import free_size, on_chip, read, write
from nkibot.sim.errors import fail
from nkibot.sim.isa.enums import reduce_cmd
from nkibot.sim.state import current
from nkibot.sim.tensor import NkiTensor

Arr = np.ndarray[Any, Any]
LANES = 128

#: Identity of each reduce op, what `reset` loads.
IDENTITY: dict[str, float] = {
    "add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf,
    "abs_max": 0.0, "abs_min": np.inf,
}
_FOLD: dict[str, Any] = {
    "add": np.add.reduce, "multiply": np.multiply.reduce, "maximum": np.maximum.reduce,
    "minimum": np.minimum.reduce,
    "abs_max": lambda v, axis: np.abs(v).max(axis=axis),
    "abs_min": lambda v, axis: np.abs(v).min(axis=axis),
}


def registers(engine: str) -> Arr:
    regs: Arr = current().regs.setdefault(engine, np.zeros(LANES, np.float32))
    return regs


def reduce_op_name(op: Any, allowed: tuple[str, ...], opname: str) -> str:
    name = ops.op_name(op, "reduce_op")
    if name not in allowed:
        raise fail("op-illegal", f"{opname}: reduce_op {name} is not one of "
                                 + ", ".join(allowed))
    return name


def fold(values: Arr, name: str) -> Arr:
    """Reduce [P, ...] values over their free axes with the named op."""
    flat = values.reshape(values.shape[0], -1).astype(np.float32, copy=False)
    out: Arr = np.asarray(_FOLD[name](flat, axis=1), np.float32)
    return out


def accumulate(engine: str, values: Arr, name: str, cmd: Any, init: Any = None) -> Arr:
    """Apply `cmd` with this instruction's `values`; returns the lanes' registers."""
    regs = registers(engine)
    parts = values.shape[0]
    if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce):
        regs[:parts] = IDENTITY[name]
    elif cmd is reduce_cmd.load_reduce:
        if init is None:
            raise fail("unsupported", "reduce_cmd.load_reduce needs an initial value "
                                      "(reduce_init / imm1)")
        regs[:parts] = _lanes(init, parts)
    if cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce, reduce_cmd.load_reduce):
        both = np.stack([regs[:parts], fold(values, name)], axis=1)
        regs[:parts] = fold(both, name)
    return regs[:parts]


def _lanes(v: Any, parts: int) -> Arr:
    if isinstance(v, NkiTensor):
        return read(v).reshape(-1)[:parts]
    return np.full(parts, np.float32(v), np.float32)


def write_result(res: NkiTensor | None, lanes: Arr, parts: int, opname: str,
                 negate: bool = False) -> None:
    """Read the registers out into a [P, 1] `reduce_res` tile (when one is given)."""
    if res is None:
        return
    res = on_chip(res, opname, "reduce_res")
    if res.shape[0] != parts or free_size(res) != 1:
        raise fail("shape-mismatch", f"{opname}: reduce_res {res.describe()} must be "
                                     f"[{parts}, 1]")
    write(res, -lanes if negate else lanes, opname)
