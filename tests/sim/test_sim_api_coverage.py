"""Every function of the official nki.isa / nki.language / nki API exists with its signature.

The official names and parameter lists are written down as data in
data/nki_api_stubs.json (names, kinds and defaults only), taken from the stubs in
aws-neuron/aws-neuron-sdk nki/api/nki/{isa,language}/__init__.py and nki/api/nki/__init__.py.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nkibot.sim import isa, language, runtime

STUBS = json.loads((Path(__file__).parent / "data" / "nki_api_stubs.json").read_text())
MODULES: dict[str, ModuleType] = {"nki.isa": isa, "nki.language": language, "nki": runtime.NKI}
CASES = [(mod, fn, params) for mod, fns in STUBS["modules"].items()
         for fn, params in fns.items()]


def _resolve(text: str, mod: ModuleType) -> Any:
    """A stub default as a value in our module (`engine.unknown`, `sbuf`, `maximum`...)."""
    if text == "...":
        return Ellipsis
    scope = {**vars(language), **vars(mod)}
    return eval(text, {"__builtins__": {}}, scope)  # our own data file


def _same_default(ours: Any, theirs: Any) -> bool:
    op = getattr(theirs, "_nki_op", None)
    if op is not None:
        return getattr(ours, "_nki_op", None) == op
    return bool(ours == theirs) and type(ours) is type(theirs)


def test_the_stub_data_covers_the_whole_official_api() -> None:
    """52 nki.isa and 103 nki.language functions (the counts of the official stubs)."""
    counts = {mod: len(fns) for mod, fns in STUBS["modules"].items()}
    assert counts == {"nki.isa": 52, "nki.language": 103, "nki": 2}


@pytest.mark.parametrize(("module", "name", "params"), CASES,
                         ids=[f"{m}.{f}" for m, f, _ in CASES])
def test_function_exists_with_the_official_signature(module: str, name: str,
                                                     params: list[dict[str, str]]) -> None:
    """Same parameter names, order, kinds and defaults as the official stub."""
    mod = MODULES[module]
    fn = getattr(mod, name, None)
    assert callable(fn), f"{module}.{name} is missing"
    ours = list(inspect.signature(fn).parameters.values())
    assert [(p.name, p.kind.name) for p in ours] == [(p["name"], p["kind"]) for p in params]
    for p, spec in zip(ours, params, strict=True):
        if "default" not in spec:
            assert p.default is inspect.Parameter.empty, f"{name}({p.name}) has a default"
            continue
        theirs = _resolve(spec["default"], mod)
        assert _same_default(p.default, theirs), (
            f"{module}.{name}({p.name}=...): ours {p.default!r}, official {spec['default']}")


def test_nkitensor_has_every_documented_method_and_attribute(nki: ModuleType) -> None:
    """The official NkiTensor class: its methods (parameter names) and attributes."""
    from nkibot.sim.tensor import NkiTensor

    spec = STUBS["NkiTensor"]
    for name, params in spec["methods"].items():
        method = getattr(NkiTensor, name, None)
        assert callable(method), f"NkiTensor.{name} is missing"
        assert list(inspect.signature(method).parameters) == params, name
    t = language.ndarray((4, 8), dtype=language.float32, buffer=language.sbuf)
    for attr in spec["attributes"]:
        assert hasattr(t, attr), f"NkiTensor.{attr} is missing"
