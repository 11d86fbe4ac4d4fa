"""The text of the generated pytest file; `{{NAME}}` placeholders are filled by artifacts.

Kept as a string (not a package data file) so that it ships with the wheel as-is. The
generated test depends on numpy, torch and pytest, plus either the official `nki`
package or nkibot's simulator; it must not import anything else from nkibot.
"""

TEMPLATE = '''"""Checks the nkibot-generated NKI kernel against its PyTorch reference {{TARGET}}.

Runs the kernel on a Neuron device when the official `nki` package and a device are
present; otherwise in a simulator through `nki.simulate` (nkibot's CPU simulator when the
official package is not installed).
Calling convention: {{CONVENTION}}

Self-contained: it needs numpy, torch and pytest, and no pytest plugin or configuration.
Run it with `pytest <its folder>`; where nkibot wrote it locally, a `pytest.ini` in the
output folder keeps the enclosing project's pytest configuration (plugins such as
pytest-asyncio, strict options) out. Anywhere else whose configuration gets in the way:
`pytest -c /dev/null --rootdir <its folder> <this file>`.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
KERNEL_FILE = HERE / {{KERNEL_FILE}}
REFERENCE_FILE = HERE / {{REFERENCE_FILE}}
ENTRY = {{ENTRY}}
KIND = {{KIND}}
KERNEL_FUNCTION = {{KERNEL_FUNCTION}}
INIT_ARGS: list[Any] = {{INIT_ARGS}}
INPUTS: list[tuple[tuple[int, ...], str]] = {{INPUTS}}
STATE_KEYS: list[str] = {{STATE_KEYS}}
ATOL = {{ATOL}}
RTOL = {{RTOL}}
#: The Trainium generation the kernel was checked for (the simulator applies its rules).
PLATFORM = {{PLATFORM}}
LOW_PRECISION = {"bfloat16", "float16", "float8_e4m3", "float8_e5m2"}


def _nki_context() -> Any:
    if importlib.util.find_spec("nki") is not None:
        return contextlib.nullcontext()
    try:
        from nkibot.sim import activate
    except ImportError:
        pytest.skip("needs the Neuron SDK's `nki` package or nkibot's simulator "
                    "(pip install nkibot)")
    return activate(target=PLATFORM)


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # the reference may import its siblings
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def _torch_dtype(name: str) -> Any:
    return getattr(torch, {"float8_e4m3": "float8_e4m3fn"}.get(name, name))


def _numpy(tensor: Any, dtype: str) -> np.ndarray:
    value = tensor.detach().cpu()
    if dtype in LOW_PRECISION:
        import ml_dtypes

        target = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
                  "float8_e4m3": ml_dtypes.float8_e4m3fn,
                  "float8_e5m2": ml_dtypes.float8_e5m2}[dtype]
        return value.float().numpy().astype(target)
    # NKI has no 64-bit dtypes: int64 and float64 arrive as int32 and float32 (the calling
    # convention), e.g. token ids or BatchNorm's num_batches_tracked
    narrow = {torch.int64: np.int32, torch.float64: np.float32}.get(value.dtype)
    return value.numpy().astype(narrow) if narrow is not None else value.numpy()


def _inputs(seed: int) -> list[Any]:
    gen = torch.Generator().manual_seed(seed)
    made = []
    for shape, dtype in INPUTS:
        if dtype == "bool":
            made.append(torch.randint(0, 2, shape, generator=gen).bool())
        elif dtype.startswith(("int", "uint")):
            made.append(torch.randint(0, 4, shape, generator=gen).to(_torch_dtype(dtype)))
        else:
            made.append(torch.randn(shape, generator=gen).to(_torch_dtype(dtype)))
    return made


def _reference() -> Any:
    if KIND == "triton" and not torch.cuda.is_available():
        # The Triton kernel's launcher runs on Triton's CPU interpreter, read at import.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    module = _load(REFERENCE_FILE, "nkibot_reference")
    if KIND != "module":
        return getattr(module, ENTRY), {}
    torch.manual_seed(0)
    model = getattr(module, ENTRY)(*INIT_ARGS).eval()
    state = model.state_dict()
    return model, {key: state[key] for key in STATE_KEYS}


def _run_kernel(args: list[np.ndarray]) -> tuple[Any, ...]:
    with _nki_context():
        import nki

        kernel = getattr(_load(KERNEL_FILE, "nkibot_kernel"), KERNEL_FUNCTION)
        simulated = getattr(nki, "__nkibot_sim__", False) or not glob.glob("/dev/neuron*")
        out = nki.simulate(kernel)(*args) if simulated else kernel(*args)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_reference(seed: int) -> None:
    """The kernel's outputs match the PyTorch reference within the verified tolerance."""
    reference, state = _reference()
    inputs = _inputs(seed)
    with torch.no_grad():
        expected = reference(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    args = [_numpy(t, d) for t, (_, d) in zip(inputs, INPUTS, strict=True)]
    args += [_numpy(state[k], str(state[k].dtype).removeprefix("torch.")) for k in STATE_KEYS]
    actual = _run_kernel(args)
    assert len(actual) == len(expected), "the kernel returns a different number of outputs"
    for got, want in zip(actual, expected, strict=True):
        want_np = want.detach().float().numpy()
        got_np = np.asarray(got, dtype=np.float32)
        assert got_np.shape == want_np.shape
        np.testing.assert_allclose(got_np, want_np, atol=ATOL, rtol=RTOL)
'''
