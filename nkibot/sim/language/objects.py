"""`nl.NKIObject`: the base of kernel dataclasses and configuration objects.

As the NKI language guide describes: a subclass works like a dataclass with or without
`@dataclass` (an `__init__` over its annotated fields, in order, defaulting to the class
value or None, then `__post_init__`), and equality is structural.
"""

from __future__ import annotations

import inspect
from typing import Any


class NKIObject:
    """Base class for NKI kernel dataclasses and configuration objects."""

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            setattr(cls, "__init__", _field_init(_fields(cls)))  # noqa: B010 - a generated method

    def __post_init__(self) -> None:
        """Called after the generated `__init__` (override to validate or derive)."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = object.__hash__


def _fields(cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in inspect.get_annotations(klass):
            if name not in names:
                names.append(name)
    return names


def _field_init(fields: list[str]) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} positional fields")
        given = dict(zip(fields, args, strict=False)) | kwargs
        for name in fields:
            setattr(self, name, given.pop(name, getattr(type(self), name, None)))
        for name, value in given.items():
            setattr(self, name, value)
        self.__post_init__()

    return __init__
