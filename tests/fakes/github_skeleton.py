"""Complete-enough JSON for githubkit's response models, built from the models themselves.

The double fills what the product reads from its own state and lets `skeleton`
supply every other required field with a plausible value, so githubkit's
validation of real HTTP responses passes without hand-listing hundreds of keys.
"""

from __future__ import annotations

import datetime as dt
import enum
import types
import typing
from typing import Any

from pydantic import BaseModel

NOW = "2026-01-01T00:00:00Z"


def _sample_str(name: str) -> str:
    if name.endswith("url") or name == "href":
        return f"https://github.invalid/{name}"
    if name.endswith("sha") or name == "sha":
        return "0" * 40
    if name.endswith("_at") or name == "date":
        return NOW
    if name == "node_id":
        return "MDQ6VXNlcjE="
    return name


def sample(annotation: Any, name: str, depth: int = 0) -> Any:
    """A JSON value valid for `annotation`; None where the type allows it."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return sample(args[0], name, depth)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args:
            return None
        concrete = [a for a in args if repr(a) != "typing.Literal[<UNSET>]"]
        return sample(concrete[0], name, depth)
    if origin is typing.Literal:
        return args[0].value if isinstance(args[0], enum.Enum) else args[0]
    if origin in (list, tuple, set, frozenset):
        return []
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return skeleton(annotation, depth=depth + 1)
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, int):
            return 1
        if issubclass(annotation, float):
            return 0.0
        if issubclass(annotation, dt.datetime):
            return NOW
        if issubclass(annotation, dt.date):
            return NOW[:10]
        if issubclass(annotation, enum.Enum):
            return next(iter(annotation)).value
        if issubclass(annotation, str):
            return _sample_str(name)
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The (first) pydantic model a field's annotation admits, through Optional/Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if typing.get_origin(annotation) in (list, tuple):
            return None
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is list:
            return _model_in(typing.get_args(arg)[0])
    return None


def skeleton(model: type[BaseModel], overrides: dict[str, Any] | None = None,
             depth: int = 0) -> dict[str, Any]:
    """Every required field of `model` (by alias) with a sample value, then `overrides`.

    Nested overrides are completed the same way, so a partial nested object is enough.
    """
    if depth > 12:
        raise RecursionError(f"{model.__name__} nests too deeply")
    out: dict[str, Any] = {}
    by_key = {(f.alias or n): f for n, f in model.model_fields.items()}
    for key, field in by_key.items():
        if field.is_required():
            out[key] = sample(field.annotation, key, depth)
    for key, value in (overrides or {}).items():
        field = by_key.get(key)
        sub = _model_in(field.annotation) if field is not None else None
        item = _list_item_model(field.annotation) if field is not None else None
        if isinstance(value, dict) and sub is not None:
            out[key] = skeleton(sub, value, depth + 1)
        elif isinstance(value, list) and item is not None:
            out[key] = [skeleton(item, v, depth + 1) if isinstance(v, dict) else v for v in value]
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
