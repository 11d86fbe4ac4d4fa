"""nkibot's NKI cost model: modelled device time from documented hardware figures.

The official `nki.simulate` "does not model instruction latency"; this package does, per
generation (trn1, trn2, trn3). Every instruction the simulator runs reaches the model
through one hook at issue (`nkibot.sim.issue`), with its engine and the tiles it reads
and writes; `schedule.Recorder` puts it on its engine's timeline (or the DMA queues)
after the tiles it depends on. Figures come from `constants.py`, each citing its source.
See docs/cost-model.md. Every figure is a "model estimate (<target>), not a measurement".

Without loading the simulator: `constants` (the documented figures per generation) and
`quick` (closed-form estimates of one instruction or transfer, for the lowering's
choosers). Stable API (used by the lowering to pick tilings)::

    from nkibot.sim.cost import estimate
    rep = estimate(kernel, a, b, target="trn1")          # arrays, or shapes:
    rep = estimate(kernel, ((8192, 4096), "bfloat16"), ((8192, 8192), "bfloat16"))
    rep.makespan_us, rep.roofline_fraction, rep.critical_engine, rep.as_dict()

`estimate` runs in cost-only mode by default: matmul arithmetic (the one step whose
NumPy cost grows as K*M*N) is skipped, everything else runs, so published shapes are
evaluated in seconds. Pass `numerics=True` to also compute the matmuls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nkibot.sim.cost import quick
from nkibot.sim.cost.constants import TARGETS, Ranged, Target, target

if TYPE_CHECKING:
    from nkibot.sim.cost.launch import estimate, measure
    from nkibot.sim.cost.model import Knobs
    from nkibot.sim.cost.report import CostReport, label
    from nkibot.sim.cost.schedule import Recorder

__all__ = ["TARGETS", "CostReport", "Knobs", "Ranged", "Recorder", "Target", "estimate",
           "label", "measure", "quick", "target"]

# The figures (constants, quick) import eagerly and load no simulator; the rest loads on
# first use (the lowering's choosers import this package in children that must stay light).
_LAZY = {"estimate": "launch", "measure": "launch", "Knobs": "model",
         "CostReport": "report", "label": "report", "Recorder": "schedule"}


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nkibot.sim.cost' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nkibot.sim.cost.{module}"), name)
    globals()[name] = value
    return value
