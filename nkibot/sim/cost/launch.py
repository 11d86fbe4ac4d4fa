"""`estimate` and `measure`: one launch on the simulator, placed on the model's timelines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkibot.sim import dtypes
from nkibot.sim.cost.constants import target
from nkibot.sim.cost.model import Knobs
from nkibot.sim.cost.report import CostReport, build
from nkibot.sim.cost.schedule import Recorder

Shape = tuple[tuple[int, ...], Any]


def _array(spec: Any) -> Any:
    """An input: an array as given, or zeros for a `(shape, dtype)` pair."""
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], tuple | list):
        return np.zeros(tuple(spec[0]), dtypes.normalize(spec[1]))
    return spec


def _nbytes(value: Any) -> int:
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def measure(run: Callable[[Recorder], Any], args: tuple[Any, ...], target_name: str = "trn1",
            knobs: Knobs | None = None, cost_only: bool = True) -> tuple[Any, CostReport]:
    """Run `run(recorder)` (a launch fed to the recorder) and report on it.

    `args` are the launch's HBM inputs; with the outputs they make the roofline's
    minimum HBM traffic.
    """
    rec = Recorder(target(target_name), knobs)
    result = run(rec)
    return result, build(rec, _nbytes(args) + _nbytes(result), cost_only)


def estimate(kernel: Any, *arrays_or_shapes: Any, target: str = "trn1",
             numerics: bool = False, knobs: Knobs | None = None, lnc: int = 1,
             **kwargs: Any) -> CostReport:
    """The modelled time of one launch of `kernel` (a `@nki.jit` function or plain one).

    Inputs are NumPy arrays or `(shape, dtype)` pairs (zeros are used). Raises the
    simulator's `ConstraintError`/`KernelError` when the kernel breaks a hardware rule.
    """
    from nkibot.sim.runtime import Kernel, activate, run

    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    lnc = kernel.lnc if isinstance(kernel, Kernel) and kernel.lnc > 1 else lnc
    args = tuple(_array(a) for a in arrays_or_shapes)
    with activate(force=True, target=target):
        _, report = measure(lambda rec: run(fn, args, kwargs, lnc, cost=rec, numerics=numerics),
                            args, target, knobs, cost_only=not numerics)
    return report
