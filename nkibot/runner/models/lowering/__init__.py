"""Deterministic lowering: torch.fx graphs of common operators -> readable NKI kernels.

`LoweringBackend` is the `lowering` model backend (zero tokens); `lower_task` is the
in-process API the sandboxed child (`python -m nkibot.runner.models.lowering`) and the
tests use. Importing this package does not import torch.
"""

from nkibot.runner.models.lowering.backend import LoweringBackend, lower_in_sandbox
from nkibot.runner.models.lowering.lower import lower_task
from nkibot.runner.models.lowering.plan import Declined, Lowered

__all__ = ["Declined", "Lowered", "LoweringBackend", "lower_in_sandbox", "lower_task"]
