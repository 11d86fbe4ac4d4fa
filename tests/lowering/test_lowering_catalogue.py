"""One op catalogue: every process sees the same covered ops, whatever it imported first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nkibot.lowering.frontend import catalogue

ROOT = Path(__file__).resolve().parents[2]
#: Ops whose handlers live in op modules a process might not have imported (conv, scans,
#: cat, flip, attention) next to ones registered by decompose itself.
SPREAD = ["conv2d", "cumsum", "cat", "flip", "scaled_dot_product_attention", "relu",
          "transpose", "Conv2d"]


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


class TestCatalogue:
    def test_fresh_interpreter_covers_every_family(self) -> None:
        """Discovery's covered_op, asked first thing in a new interpreter, knows conv2d,
        cumsum, cat, flip and attention (it answered False before the catalogue)."""
        code = ("import json; from nkibot.convert.staticops import covered_op; "
                f"print(json.dumps([covered_op(op) for op in {SPREAD!r}]))")
        assert json.loads(_fresh(code)) == [True] * len(SPREAD)

    def test_catalogue_imports_no_torch(self) -> None:
        """The webhook service reads the catalogue without torch installed or loaded."""
        code = ("import sys; import nkibot.lowering.frontend.catalogue; "
                "print('torch' in sys.modules)")
        assert _fresh(code) == "False"

    def test_tracer_and_discovery_read_the_same_list(self) -> None:
        """The tracer's handlers are the catalogue's; discovery covers exactly those."""
        from nkibot.convert.staticops import covered_op
        from nkibot.lowering.frontend import trace

        assert trace.handler is catalogue.handler
        assert all(covered_op(op) for op in catalogue.TORCH_OPS | catalogue.LOWERED_MODULES)
        assert not covered_op("erfinv")

    def test_docs_list_the_catalogue(self) -> None:
        """docs/lowering.md shows the catalogue's listing verbatim."""
        docs = (ROOT / "docs" / "lowering.md").read_text()
        assert catalogue.listing() in docs

    def test_module_table_matches_the_lowering(self) -> None:
        """The torch-free module list is the lowering's nn.Module table."""
        from nkibot.lowering.frontend.modules import _MODULES

        assert set(_MODULES) == catalogue.LOWERED_MODULES
