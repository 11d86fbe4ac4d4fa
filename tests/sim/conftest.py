"""Fixtures for simulator tests: the active `nki`, the conformance kernels, kernel files."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nkibot.sim import activate
from tests.sim.sim_helpers import load_module

HERE = Path(__file__).resolve().parent


@pytest.fixture
def nki(kernel_backend_name: str) -> Iterator[ModuleType]:
    """Our `nki` on the sim backend (real `nki` on neuron), with sys.modules restored after."""
    with activate(force=kernel_backend_name == "sim", target="trn1") as mod:
        if mod is None:
            import nki as real

            mod = real
        yield mod


@pytest.fixture
def nl(nki: ModuleType) -> ModuleType:
    """`nki.language` of the active backend."""
    return nki.language


@pytest.fixture
def nisa(nki: ModuleType) -> ModuleType:
    """`nki.isa` of the active backend."""
    return nki.isa


@pytest.fixture
def ck(nki: ModuleType) -> ModuleType:
    """The conformance kernels, imported against the backend's `nki`."""
    return load_module(HERE / "conformance_kernels.py", "conformance_kernels")


@pytest.fixture
def launch(nki: ModuleType, kernel_backend_name: str) -> Callable[..., Any]:
    """Run a kernel on NumPy arrays: nki.simulate on sim, a direct call on a NeuronCore."""

    def go(kernel: Any, *arrays: Any) -> Any:
        if kernel_backend_name == "sim":
            return nki.simulate(kernel)(*arrays)
        return kernel(*arrays)

    return go


@pytest.fixture
def kernel_file(tmp_path: Path, nki: ModuleType) -> Callable[[str], ModuleType]:
    """Write kernel source to tmp_path/kernel.py and import it under the active `nki`."""
    counter = [0]

    def write(source: str) -> ModuleType:
        counter[0] += 1
        path = tmp_path / f"kernel{counter[0]}.py"
        header = ("import numpy as np\nimport nki\nimport nki.language as nl\n"
                  "import nki.isa as nisa\n")
        path.write_text(header + textwrap.dedent(source))
        return load_module(path, f"sim_test_kernel{counter[0]}")

    return write

