"""The matmul's resident B panel: 512 columns wide, a transposed B transposed into it once."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import (
    check_on_sim,
    lower_ok,
    make_task,
    module_source,
)

#: name -> (expression, shapes): ragged M, K and N; N over one 512-column panel
PANELS = {
    "transposed_b": ("torch.matmul(x, y.transpose(0, 1))", [(200, 300), (600, 300)]),
    "transposed_both": ("x.t() @ y.t()", [(300, 130), (520, 300)]),
    "aligned": ("torch.matmul(x, y.T)", [(256, 256), (512, 256)]),
    "k_outer_plain_b": ("torch.relu(x @ y) * 0.5", [(200, 700), (700, 300)]),
}


def _task(name: str, dtype: str):  # type: ignore[no-untyped-def]
    expr, shapes = PANELS[name]
    return make_task(module_source(expr, "x, y"), shapes, dtype)


def variant(task, name: str) -> str:  # type: ignore[no-untyped-def]
    """The source of the lowering's variant `name` (e.g. "matmul tiling b-panel")."""
    found = [v.source for v in lower_ok(task).variants if v.name == name]
    assert found, [v.name for v in lower_ok(task).variants]
    return found[0]


class TestTransposedPanelOnSim:
    """A transposed B goes into a 512-column panel 128 columns at a time, and matches PyTorch."""

    @pytest.mark.parametrize("name", sorted(PANELS))
    def test_fp32_matches_torch(self, name: str) -> None:
        """fp32 products match within 1e-3 at ragged and aligned shapes."""
        check_on_sim(_task(name, "float32"))

    @pytest.mark.parametrize("name", ["transposed_b", "aligned"])
    def test_bf16_matches_torch(self, name: str) -> None:
        """bf16 operands stay bf16 on the PE and match within 2e-2."""
        check_on_sim(_task(name, "bfloat16"))

    def test_panel_is_512_columns_wide(self) -> None:
        """The panel serves 512 output columns, so A's blocks are transposed once per 512."""
        src = variant(_task("transposed_b", "float32"), "matmul tiling b-panel")
        assert "tiling: b-panel" in src
        assert "for j0 in range(0, q, 128):" in src
        assert ", 0, 512)" in src and ", 512, 88)" in src

    def test_few_row_tiles_run_the_k_loop_outside(self) -> None:
        """Two row tiles accumulate side by side, so each panel block is used as it lands."""
        src = variant(_task("k_outer_plain_b", "float32"), "matmul tiling b-panel")
        assert "def matmul_kouter(" in src and "acc0, acc1" in src
        assert "def matmul_tile(" not in src and "def matmul_panel(" not in src
