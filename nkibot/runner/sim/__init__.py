"""Deprecated: the simulator moved to `nkibot.sim`. This re-export goes in the next release.

Kernel tests generated before the move import `nkibot.runner.sim`; they keep working, with a
warning that names the new path.
"""

from __future__ import annotations

import warnings

from nkibot.sim import *  # noqa: F403
from nkibot.sim import __all__ as __all__

warnings.warn("nkibot.runner.sim moved to nkibot.sim; import it from there",
              DeprecationWarning, stacklevel=2)
