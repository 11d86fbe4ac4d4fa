"""Generations: one negative case per rule per generation where trn1/trn2/trn3 differ.

Each case is a kernel that is legal on some generations and refused on the others; it
runs on all three, so each rule is shown both to hold where the docs say it does and to
be lifted where they say it is (targets.RULES cites the line).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nkibot.sim import ConstraintError, activate, targets
from tests.sim.sim_helpers import load_module

HEADER = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n"
F32 = np.float32
BF16 = ml_dtypes.bfloat16

# rule -> (kernel body, inputs, {target: None (runs) or the rule id it is refused with})
CASES: dict[str, tuple[str, tuple[Any, ...], dict[str, str | None]]] = {
    "sbuf 200000 B/partition (over v2's 192 KiB)": ("""
        t = nl.ndarray((128, 50000), dtype=nl.float32, buffer=nl.sbuf)
        """, (), {"trn1": "sbuf-capacity", "trn2": None, "trn3": None}),
    "sbuf 240000 B/partition (over v3's 224 KiB)": ("""
        t = nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)
        """, (), {"trn1": "sbuf-capacity", "trn2": "sbuf-capacity", "trn3": None}),
    "matmul moving free 1024, fp32 dst": ("""
        p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
        """, ("eye", (128, 1024)), {"trn1": "matmul-moving-free", "trn2": "matmul-moving-free",
                                    "trn3": None}),
    "matmul moving free 4096 (all of PSUM), fp32 dst": ("""
        p = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
        """, ("eye", (128, 4096)), {"trn1": "matmul-moving-free", "trn2": "matmul-moving-free",
                                    "trn3": None}),
    "matmul bf16 PSUM dst, moving free 8192": ("""
        p = nl.ndarray((128, 8192), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
        """, ("eye", (128, 8192)), {"trn1": "dtype-illegal", "trn2": "dtype-illegal",
                                    "trn3": None}),
    "matmul bf16 PSUM dst": ("""
        p = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
        """, ("eye", (128, 64)), {"trn1": "dtype-illegal", "trn2": "dtype-illegal", "trn3": None}),
    "matmul float8_e4m3fn operands": ("""
        s = nl.ndarray((128, 128), dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
        m = nl.ndarray((128, 64), dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
        nisa.memset(dst=s, value=1.0)
        nisa.memset(dst=m, value=1.0)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=s, moving=m)
        """, (), {"trn1": "dtype-illegal", "trn2": "dtype-illegal", "trn3": None}),
    "matmul mixing float8_e4m3 with float8_e4m3fn": ("""
        s = nl.ndarray((128, 128), dtype=nl.float8_e4m3, buffer=nl.sbuf)
        m = nl.ndarray((128, 64), dtype=nl.float8_e4m3fn, buffer=nl.sbuf)
        nisa.memset(dst=s, value=1.0)
        nisa.memset(dst=m, value=1.0)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=s, moving=m)
        """, (), {"trn1": "dtype-illegal", "trn2": "dtype-illegal", "trn3": "dtype-illegal"}),
    "matmul accumulate onto memset PSUM": ("""
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b), accumulate=True)
        """, ("eye", (128, 64)), {"trn1": "psum-accumulate", "trn2": "psum-accumulate",
                                  "trn3": None}),
    "matmul perf_mode double_row (fp8)": ("""
        s = nl.ndarray((128, 2, 64), dtype=nl.float8_e5m2, buffer=nl.sbuf)
        m = nl.ndarray((128, 2, 64), dtype=nl.float8_e5m2, buffer=nl.sbuf)
        nisa.memset(dst=s, value=1.0)
        nisa.memset(dst=m, value=1.0)
        p = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=s, moving=m,
                       perf_mode=nisa.matmul_perf_mode.double_row)
        """, (), {"trn1": "arch-unsupported", "trn2": None, "trn3": None}),
    "matmul perf_mode double_row with fp32 operands": ("""
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b),
                       perf_mode=nisa.matmul_perf_mode.double_row)
        """, ("eye", (128, 64)), {"trn1": "arch-unsupported", "trn2": "dtype-illegal",
                                  "trn3": "dtype-illegal"}),
    "activation scalar bias": ("""
        x = nl.load(a)
        nisa.activation(dst=x, op=nl.exp, data=x, bias=1.0)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": None, "trn3": None}),
    "activation reduce_op=nl.maximum": ("""
        x = nl.load(a)
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=x, op=nl.exp, data=x, reduce_op=nl.maximum, reduce_res=r)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": None, "trn3": None}),
    "dma_copy dge_mode=hwdge": ("""
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a, dge_mode=nisa.dge_mode.hwdge)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": None, "trn3": None}),
    "dma_copy priority": ("""
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a, priority=1)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": "arch-unsupported",
                           "trn3": None}),
    "nisa.exponential": ("""
        x = nl.load(a)
        nisa.exponential(dst=x, src=x)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": "arch-unsupported",
                           "trn3": None}),
    "nl.abs_max": ("""
        x = nl.load(a)
        y = nl.abs_max(x, x)
        """, ((128, 8),), {"trn1": "arch-unsupported", "trn2": "arch-unsupported",
                           "trn3": None}),
}


def _inputs(spec: tuple[Any, ...]) -> list[np.ndarray[Any, Any]]:
    if spec and spec[0] == "eye":
        return [np.eye(128, dtype=F32), np.ones(spec[1], F32)]
    return [np.ones(shape, F32) for shape in spec]


def _kernel(tmp_path: Path, name: str, body: str, n_inputs: int) -> ModuleType:
    args = ", ".join("ab"[:n_inputs]) if n_inputs else "a=None"
    source = (f"{HEADER}\n@nki.jit\ndef k({args}):\n"
              + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n"
              "    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
              "    nl.store(out, nl.full((1, 1), 1.0, dtype=nl.float32))\n"
              "    return out\n")
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_module(path, name)


@pytest.mark.parametrize("target", targets.TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_generation_rule(case: str, target: str, tmp_path: Path) -> None:
    body, spec, expect = CASES[case]
    arrays = _inputs(spec)
    with activate(force=True, target=target) as nki:
        assert nki is not None
        mod = _kernel(tmp_path, f"gen_{abs(hash(case))}_{target}", body, len(arrays))
        run = nki.simulate(mod.k)
        if expect[target] is None:
            np.testing.assert_array_equal(run(*arrays), [[1.0]])
        else:
            with pytest.raises(ConstraintError) as info:
                run(*arrays)
            assert info.value.rule == expect[target], str(info.value)
            assert target in str(info.value) or info.value.rule == "dtype-illegal"


def test_every_differing_rule_has_a_case() -> None:
    """Each rule whose value differs between generations is exercised above."""
    differing = {k for k, r in targets.RULES.items() if len({repr(r.on(t))
                                                             for t in targets.TARGETS}) > 1}
    covered = {"sbuf_partition_bytes", "matmul_moving_fmax_fp32", "matmul_moving_fmax_bf16",
               "matmul_dst_dtypes", "matmul_operand_dtypes", "matmul_perf_mode",
               "matmul_accumulate_onto_initialised", "activation_scalar_bias",
               "activation_reduce_ops", "dma_hwdge", "dma_priority"}
    # mx_dtypes: the MX dtypes themselves arrive with nc_matmul_mx/quantize_mx.
    assert differing - covered == {"mx_dtypes"}


def test_every_rule_cites_a_documentation_line() -> None:
    for key, rule in targets.RULES.items():
        assert rule.says, key
        for src in rule.source.split("; "):
            path, _, line = src.partition(":")
            assert path.startswith("nki/") and int(line) > 0, (key, src)
    for name, (version, src) in targets.INSTRUCTIONS.items():
        assert version in (3, 4) and src.startswith("nki/api/nki/"), name


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv(targets.ENV_VAR, raising=False)
    yield monkeypatch


def _version_kernel(tmp_path: Path) -> ModuleType:
    path = tmp_path / "version.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            v = nisa.get_nc_version()
            out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nl.full((1, 1), float(v.name[-1]), dtype=nl.float32))
            return out
        """))
    return load_module(path, "version_kernel")


@pytest.mark.parametrize(("value", "version"), [
    (None, 4), ("", 4), ("trn1", 2), ("inf2", 2), ("gen2", 2), ("trn2", 3), ("gen3", 3),
    ("trn3", 4), ("gen4", 4), ("TRN2", 3),
])
def test_env_var_selects_generation(value: str | None, version: int, tmp_path: Path,
                                    clean_env: pytest.MonkeyPatch) -> None:
    """NEURON_PLATFORM_TARGET_OVERRIDE as the official simulator reads it; unset: trn3."""
    if value is not None:
        clean_env.setenv(targets.ENV_VAR, value)
    with activate(force=True) as nki:
        assert nki is not None
        got = nki.simulate(_version_kernel(tmp_path).k)(np.ones((1, 1), F32))
    assert got[0, 0] == version


def test_activate_target_overrides_env(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(targets.ENV_VAR, "trn3")
    with activate(force=True, target="trn1") as nki:
        assert nki is not None
        got = nki.simulate(_version_kernel(tmp_path).k)(np.ones((1, 1), F32))
    assert got[0, 0] == 2


def test_unknown_env_value_is_refused(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(targets.ENV_VAR, "trn9")
    with activate(force=True) as nki:
        assert nki is not None
        with pytest.raises(ConstraintError, match="trn9") as info:
            nki.simulate(_version_kernel(tmp_path).k)(np.ones((1, 1), F32))
    assert info.value.rule == "target-unknown"


def test_unknown_activate_target_is_refused() -> None:
    with pytest.raises(ConstraintError, match="trn9"), activate(force=True, target="trn9"):
        pass


@pytest.mark.parametrize(("target", "kib"), [("trn1", 192), ("trn2", 224), ("trn3", 256)])
def test_tile_size_follows_generation(target: str, kib: int, tmp_path: Path) -> None:
    path = tmp_path / "tile.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            n = nl.tile_size.sbuf_fmax_bytes // 1024
            nl.store(out, nl.full((1, 1), float(n), dtype=nl.float32))
            return out
        """))
    with activate(force=True, target=target) as nki:
        assert nki is not None
        got = nki.simulate(load_module(path, f"tile_{target}").k)(np.ones((1, 1), F32))
    assert got[0, 0] == kib


def test_scalar_engine_copy_casts_through_fp32_on_trn1(tmp_path: Path) -> None:
    """ISA:393: Scalar-engine copies on NeuronCore-v2 go through fp32 (int32 2**24+1 rounds)."""
    path = tmp_path / "scopy.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a):
            x = nl.load(a)
            y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y, src=x, engine=nisa.scalar_engine)
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, y)
            return out
        """))
    a = np.full((128, 4), 2**24 + 1, np.int32)
    for target, want in (("trn1", 2**24), ("trn2", 2**24 + 1)):
        with activate(force=True, target=target) as nki:
            assert nki is not None
            got = nki.simulate(load_module(path, f"scopy_{target}").k)(a)
        assert (got == want).all(), target


def test_trn3_matmul_accumulates_onto_memset_value(tmp_path: Path) -> None:
    """On v4 accumulate=True adds onto a memset PSUM value (v2/v3 refuse it)."""
    path = tmp_path / "acc.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a, b):
            p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.memset(dst=p, value=2.0)
            nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b), accumulate=True)
            s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=s, src=p)
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, s)
            return out
        """))
    with activate(force=True, target="trn3") as nki:
        assert nki is not None
        got = nki.simulate(load_module(path, "acc3").k)(np.eye(128, dtype=F32),
                                                         np.ones((128, 64), F32))
    np.testing.assert_array_equal(got, np.full((128, 64), 3.0, F32))


def test_trn3_bf16_psum_matmul_values(tmp_path: Path) -> None:
    """A bf16 PSUM dst with moving free 8192 on trn3 computes the product, rounded to bf16."""
    path = tmp_path / "bf.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(a, b):
            p = nl.ndarray((128, 8192), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b))
            s = nl.ndarray((128, 8192), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=s, src=p)
            out = nl.ndarray((128, 8192), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            nl.store(out, s)
            return out
        """))
    b = np.random.default_rng(0).standard_normal((128, 8192)).astype(F32)
    with activate(force=True, target="trn3") as nki:
        assert nki is not None
        got = nki.simulate(load_module(path, "bf3").k)(np.eye(128, dtype=F32) * 2, b)
    np.testing.assert_array_equal(got.astype(F32), (2 * b).astype(BF16).astype(F32))
