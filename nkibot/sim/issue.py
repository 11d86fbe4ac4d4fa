"""The one hook at instruction issue: what the cost model sees of every instruction.

`instrument(namespace, names)` wraps the public functions of `nki.isa` and
`nki.language` once, at import. With no recorder on the launch (the model off) a wrapper
costs one attribute test and a call. With one, the wrapper tells it which tensors the
instruction reads and writes (named `dst*`/`reduce_res` parameters and returned tiles are
written, every other tensor argument is read), and the engines the instruction ran on
arrive through `RunState.count`, which every instruction already calls. So an
instruction added later is costed without touching it, as long as it counts itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from nkibot.sim.state import LOCAL
from nkibot.sim.tensor import NkiTensor

_WRITTEN = ("dst", "reduce_res", "out")
#: Public functions that issue no instruction: left unwrapped (no cost when the model is on).
_NOT_INSTRUCTIONS = frozenset({
    "affine_range", "sequential_range", "static_range", "dynamic_range", "ds", "ndarray",
    "program_id", "num_programs", "program_ndim", "device_print", "no_reorder", "empty_like",
    "is_hbm", "is_on_chip", "is_psum", "is_sbuf", "get_nc_version", "get_nc_sub_version",
})


#: Instructions that keep state the hook does not see as tiles.
_STATEFUL = ("rand", "random", "set_rng", "register", "dropout")


def _written(param: str) -> bool:
    return param.startswith(_WRITTEN)


def _tensors(value: Any) -> list[NkiTensor]:
    if isinstance(value, NkiTensor):
        return [value]
    if isinstance(value, tuple | list):
        return [v for v in value if isinstance(v, NkiTensor)]
    return []


def traced(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, reporting its operands to the launch's cost recorder when there is one."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature: all reads
        params = []

    written = [_written(p) for p in params]
    # state beyond the tiles (accumulation registers, RNG, virtual registers): the
    # instruction is never dead code (cost/deadcode.py)
    cmd_at = params.index("reduce_cmd") if "reduce_cmd" in params else -1
    always = name.startswith(_STATEFUL)

    @functools.wraps(fn)
    def issue(*args: Any, **kwargs: Any) -> Any:
        rec = LOCAL.state.cost
        if rec is None or rec.depth:
            return fn(*args, **kwargs)
        reads: list[NkiTensor] = []
        writes: list[NkiTensor] = []
        n = len(written)
        for i, a in enumerate(args):
            if isinstance(a, NkiTensor):
                (writes if i < n and written[i] else reads).append(a)
        for role, a in kwargs.items():
            if isinstance(a, NkiTensor):
                (writes if _written(role) else reads).append(a)
        stateful = always or (cmd_at >= 0 and ("reduce_cmd" in kwargs or len(args) > cmd_at))
        rec.begin(name, reads, writes, stateful)
        try:
            result = fn(*args, **kwargs)
        finally:
            rec.depth -= 1
        rec.end(_tensors(result))
        return result

    return issue


def instrument(namespace: dict[str, Any], names: list[str]) -> None:
    """Replace each public function in `namespace` by its traced wrapper (once)."""
    for n in names:
        fn = namespace.get(n)
        if (inspect.isfunction(fn) and n not in _NOT_INSTRUCTIONS
                and not getattr(fn, "__nkibot_traced__", False)):
            wrapped = traced(n, fn)
            wrapped.__nkibot_traced__ = True  # type: ignore[attr-defined]
            namespace[n] = wrapped
