"""One vocabulary (issue 27): the lowering's choosers read the model's own figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nkibot.sim.cost import Knobs, quick
from nkibot.sim.cost import constants as C
from nkibot.sim.cost import model as M

ROOT = Path(__file__).resolve().parents[3]


def _loaded(module: str, heavy: tuple[str, ...]) -> list[str]:
    code = (f"import sys; import {module}; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    loaded: list[str] = eval(got.stdout)  # a list literal we printed
    return loaded


def test_the_figures_import_without_the_simulator() -> None:
    sim = ("nkibot.sim.runtime", "nkibot.sim.cost.schedule", "ml_dtypes")
    assert _loaded("nkibot.sim.cost.quick", ("numpy", *sim)) == []
    # the lowering's choosers use them without loading the simulator
    assert _loaded("nkibot.lowering.schedule.convfold", sim) == []


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_quick_estimates_are_the_model_s_rules(target: str) -> None:
    t = C.target(target)
    for free, inputs, nbytes in ((512, 2, 4), (2048, 1, 2), (16, 1, 4)):
        ins = [(free, nbytes, False, False)] * inputs
        assert quick.vector_ns(free, inputs, nbytes, target) == pytest.approx(
            M.elementwise_of(t, "vector", ins, [(free, nbytes, False, False)], Knobs()))
    # an SBUF and a PSUM input stream side by side: one input's time
    split = [(512, 4, False, False), (512, 4, False, True)]
    assert quick.vector_ns(512, 1, 4, target) == pytest.approx(
        M.elementwise_of(t, "vector", split, [(512, 4, False, False)], Knobs()))
    assert quick.matmul_ns(512, 2, target) == pytest.approx(512 / t.tensor_ghz)
    assert quick.matmul_ns(16, 4, target) == pytest.approx(64 * 4 / t.tensor_ghz)
    busy = M.dma_queue_ns(t, 2 ** 20 / 16, 2048, Knobs())
    assert quick.dma_ns(2 ** 20, 2048, 128, target, latency=False) == pytest.approx(busy)
    assert quick.dma_ns(2 ** 20, 2048, 128, target) == pytest.approx(busy + C.DMA_FIXED_NS.value)
    assert quick.sbuf_bytes(target) == t.sbuf_bytes


def test_the_lowering_budgets_are_fractions_of_the_model_s_sbuf() -> None:
    from nkibot.lowering.emit import matmul, rowwise
    from nkibot.lowering.schedule import convfold, convspec

    assert quick.SBUF_BYTES == 192 * 1024 == C.TRN1.sbuf_bytes
    assert convspec.PLANE_BUDGET == 120 * 1024 and matmul.PANEL_BUDGET == 136 * 1024
    assert rowwise.SBUF_BUDGET == 160 * 1024
    assert convfold.pe_ns is quick.pe_ns and convfold.load_ns is quick.load_ns
    assert C.DMA_DESCRIPTOR_NS.value == convfold.DESCRIPTOR_NS


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_a_pass_is_the_slope_of_the_model_s_instruction_cost(target: str) -> None:
    for engine, nbytes in (("vector", 4), ("vector", 2), ("scalar", 4), ("scalar", 2)):
        assert quick.pass_ns(engine, nbytes, target) * 4096 == pytest.approx(
            quick.vector_ns(4096, 1, nbytes, target, engine))


def test_the_lowering_restates_no_clock_bandwidth_or_queue_count() -> None:
    from nkibot.lowering.emit import fused
    from nkibot.lowering.schedule import convfold

    want = {"vector": quick.pass_ns("vector"), "scalar": quick.pass_ns("scalar")}
    assert want == fused.PASS_NS
    assert C.TRN1.dma_queues == convfold.QUEUES
    root = ROOT / "nkibot" / "lowering"
    for path in root.rglob("*.py"):  # code only: comments and docstrings may explain
        code = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
        for figure in ("1 / 1.12", "1 / 1.4", "/ 2.8", "* 17.0", "/ 16\n"):
            assert figure not in code, f"{path.relative_to(ROOT)} restates {figure!r}"
