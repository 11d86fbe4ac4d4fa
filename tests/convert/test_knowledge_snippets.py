"""Every fenced python block of the knowledge base runs on the simulator and is right.

Each block in nkibot/convert/knowledge/*.md defines one or more `@nki.jit` kernels; the
drivers below give each kernel small NumPy inputs and a NumPy reference, so what
`lookup_nki` hands the model is code known to work. A block or kernel without a driver
fails the test (add one when you add a snippet).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from nkibot.convert.agent.knowledge import KNOWLEDGE_DIR
from nkibot.sim import activate

Arr = np.ndarray[Any, Any]
F32 = np.float32
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_KERNEL = re.compile(r"@nki\.jit\s*\ndef (\w+)\(")
G = np.random.default_rng(3)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in sorted(KNOWLEDGE_DIR.glob("*.md")):
        for i, block in enumerate(_BLOCK.findall(path.read_text(encoding="utf-8"))):
            found.append((f"{path.stem}#{i}", block))
    return found


def _normal(*shape: int) -> Arr:
    return G.standard_normal(shape, dtype=F32)


def _close(rtol: float = 1e-5, atol: float = 1e-5) -> Callable[[Any, Any], None]:
    def check(out: Any, ref: Any) -> None:
        for o, r in zip(out if isinstance(out, tuple) else (out,),
                        ref if isinstance(ref, tuple) else (ref,), strict=True):
            np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    return check


def _recurrence(a: Arr, b: Arr) -> Arr:
    h, prev = np.zeros_like(a), np.zeros(a.shape[0], F32)
    for i in range(a.shape[1]):
        prev = a[:, i] * prev + b[:, i]
        h[:, i] = prev
    return h


def _top8(x: Arr) -> tuple[Arr, Arr]:
    order = np.argsort(-x, axis=1)[:, :8]
    return np.take_along_axis(x, order, axis=1), order.astype(np.uint32)


def _layer_norm(x: Arr) -> Arr:
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)


def _softmax(x: Arr) -> Arr:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _silu(a: Arr) -> Arr:
    return a / (1 + np.exp(-a))


def _dropout_stats(out: Any, ref: Any) -> None:
    x = ref
    kept = out != 0
    assert 0.7 < kept.mean() < 0.8  # p = 0.25
    np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-6)


_PERM = G.permutation(128 * 96).reshape(128, 96).astype(F32)
_KEEP = (G.uniform(size=(128, 64)) > 0.3).astype(np.uint8)
_X64 = _normal(128, 64)
_IDS = G.integers(0, 50, (100, 1)).astype(np.int32)
_TABLE = _normal(50, 32)
_A = G.uniform(0.5, 1.0, (128, 40)).astype(F32)
_B = _normal(128, 40)
_R = _normal(20, 16)

#: kernel name -> (inputs, reference output(s), comparison)
DRIVERS: dict[str, tuple[tuple[Any, ...], Any, Callable[[Any, Any], None]]] = {
    "matmul_kt": ((a := _normal(256, 64), b := _normal(256, 128)), a.T @ b, _close(1e-4, 1e-4)),
    "transpose_tile": ((t := _normal(96, 40),), t.T, _close(0, 0)),
    "ragged_double": ((r := _normal(300, 24),), 2 * r, _close(0, 0)),
    "softmax_rows": ((s := _normal(256, 80),), _softmax(s), _close(1e-5, 1e-6)),
    "layer_norm_rows": ((n := _normal(128, 200),), _layer_norm(n), _close(1e-4, 1e-4)),
    "swiglu": ((g := _normal(128, 48), u := _normal(128, 48)), _silu(g) * u, _close(1e-5, 1e-6)),
    "causal_mask": ((c := _normal(128, 128),), np.where(np.tri(128, dtype=bool), c, -30000.0),
                    _close(0, 0)),
    "cumsum_rows": ((q := _normal(128, 70),), np.cumsum(q, axis=1), _close(1e-5, 1e-4)),
    "linear_recurrence": ((_A, _B), _recurrence(_A, _B), _close(1e-5, 1e-5)),
    "top8": ((_PERM,), _top8(_PERM), _close(0, 0)),
    "masked_fill_max": ((_X64, _KEEP),
                        (f := np.where(_KEEP != 0, _X64, -1e4).astype(F32),
                         f.max(1, keepdims=True)), _close(0, 0)),
    "embedding": ((_TABLE, _IDS), _TABLE[_IDS[:, 0]], _close(0, 0)),
    "sum_first_rows": ((_R, np.array([[13]], np.int32)), _R[:13].sum(0, keepdims=True),
                       _close(1e-5, 1e-5)),
    "dropout_scaled": ((d := _normal(128, 256), np.array([[5]], np.int32)), d, _dropout_stats),
}


@pytest.mark.parametrize(("where", "source"), _blocks(), ids=[w for w, _ in _blocks()])
def test_knowledge_snippet_runs_and_matches_numpy(where: str, source: str) -> None:
    kernels = _KERNEL.findall(source)
    assert kernels, f"{where}: a knowledge snippet must define a @nki.jit kernel"
    with activate(force=True) as nki:
        assert nki is not None
        scope: dict[str, Any] = {}
        exec(compile("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n"
                     + source, f"<knowledge {where}>", "exec"), scope)
        for name in kernels:
            assert name in DRIVERS, f"{where}: kernel {name} has no driver in this test"
            inputs, ref, check = DRIVERS[name]
            check(nki.simulate(scope[name])(*[np.copy(x) for x in inputs]), ref)


def test_every_driver_belongs_to_a_snippet() -> None:
    names = {k for _, block in _blocks() for k in _KERNEL.findall(block)}
    assert set(DRIVERS) == names


def test_every_instruction_family_has_a_verified_example() -> None:
    """The families lookup_nki should answer with working code for."""
    text = "\n".join(block for _, block in _blocks())
    families = ["nisa.nc_matmul", "nisa.nc_transpose", "nisa.tensor_scalar(",
                "nisa.tensor_tensor(", "nisa.activation(", "nisa.tensor_reduce",
                "nisa.bn_stats", "nisa.affine_select", "nisa.tensor_scalar_cumulative",
                "nisa.tensor_tensor_scan", "nisa.max8", "nisa.nc_find_index8",
                "nisa.select_reduce", "vector_offset=", "nl.fori_loop", "nisa.register_load",
                "nisa.dropout", "nisa.set_rng_seed", "nisa.dma_copy", "nisa.tensor_copy("]
    missing = [f for f in families if f not in text]
    assert not missing, missing

