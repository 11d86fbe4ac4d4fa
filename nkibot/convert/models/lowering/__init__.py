"""Deterministic lowering: torch.fx graphs of common operators -> readable NKI kernels.

`LoweringBackend` is the `lowering` model backend (zero tokens); `lower_task` is the
in-process API the sandboxed child (`python -m nkibot.convert.models.lowering`) and the
tests use. Importing this package does not import torch.
"""

from nkibot.convert.models.lowering.backend import LoweringBackend, lower_in_sandbox
from nkibot.convert.models.lowering.lower import lower_task
from nkibot.convert.models.lowering.plan import Declined, Lowered

__all__ = ["Declined", "Lowered", "LoweringBackend", "lower_in_sandbox", "lower_task"]
