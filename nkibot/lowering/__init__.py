"""Deterministic lowering: torch.fx graphs of common operators -> readable NKI kernels.

`lower_task` is the in-process API the sandboxed child (`python -m nkibot.lowering`) and
the tests use; the `lowering` model backend that runs that child is
`nkibot.convert.models.lowering_backend.LoweringBackend`. Importing this package does not
import torch, and nothing here imports `nkibot.convert`.
"""

from nkibot.lowering.lower import lower_task
from nkibot.lowering.plan import Declined, Lowered

__all__ = ["Declined", "Lowered", "lower_task"]
