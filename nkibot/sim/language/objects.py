"""`nl.NKIObject`: the base of kernel dataclasses and configuration objects.

A subclass is a plain Python object inside the simulator; its keyword constructor sets
attributes, and `@dataclass` subclasses keep their generated `__init__`.
"""

from __future__ import annotations

from typing import Any


class NKIObject:
    """Base class for NKI kernel dataclasses and configuration objects."""

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)
