"""Helpers shared by the simulator tests (imported by file name from this folder)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_module(path: Path, name: str) -> ModuleType:
    """Import a file as a fresh module (kernels must see the `nki` active right now)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(module: ModuleType, marker: str) -> int:
    """1-based line of the first source line containing `marker`."""
    lines = Path(module.__file__ or "").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)
