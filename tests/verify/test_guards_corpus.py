"""Every honest kernel in the repository passes the static rules (nkibot.verify.guards).

The allow-list must not refuse what official-style NKI code does: the fixture kernels,
the knowledge base's code blocks, kernels embedded in tests and the deterministic
lowering's output for the modules its own tests convert.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from nkibot.verify.guards import static_findings

ROOT = Path(__file__).resolve().parents[2]
#: Fixtures that cheat or break on purpose (their own tests expect refusals or failures).
ADVERSARIAL = {"crash.py", "imports_torch.py", "nondeterministic.py", "reads_file.py",
               "seed_cache.py", "uses_exec.py"}
#: Embedded sources that are scripts or deliberately broken, not verification kernels.
#: Files whose strings mention kernels without being one (an .rst with code blocks, in
#: the calibration bench's extraction test, is text, not a kernel file).
NOT_KERNELS = {"tests/sim/test_sim_runtime.py", "tests/sim/test_sim_cli.py",
               "nkibot/convert/agent/prompts.py", "tests/sim/cost/test_perf_calibration.py"}
#: Embedded kernels broken on purpose inside a file that also holds honest ones: (file, a
#: snippet only the broken one contains). A syntax error for verify's message, a torch
#: import for re-profiling's refusal.
BROKEN_ON_PURPOSE = {("tests/convert/test_verify_cli.py", "return x +\n"),
                     ("tests/runner/test_reprofile.py", "import torch\n")}
HEADER = ("import math\nimport nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
          "import numpy as np\n\n\n")


def _fixture_kernels() -> list[Path]:
    kernels = sorted((ROOT / "tests" / "fixtures" / "kernels").glob("*.py"))
    return [k for k in kernels if "import nki" in k.read_text() and k.name not in ADVERSARIAL]


def _embedded() -> list[tuple[str, str]]:
    found = []
    for path in sorted([*ROOT.glob("nkibot/**/*.py"), *ROOT.glob("tests/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_KERNELS or rel.startswith("tests/verify/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and "@nki.jit" in node.value and "import nki" in node.value
                    and not any(rel == f and bit in node.value
                                for f, bit in BROKEN_ON_PURPOSE)):
                found.append((f"{rel}:{node.lineno}", textwrap.dedent(node.value)))
    return found


def _knowledge_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in sorted((ROOT / "nkibot" / "convert" / "knowledge").glob("*.md")):
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", path.read_text(), re.S)):
            # Fragments: run them as the body of a function whose parameters they use.
            body = textwrap.indent(m.group(1), "    ")
            blocks.append((f"{path.name}#{i}", f"{HEADER}def snippet(*args):\n{body}"))
    return blocks


class TestHonestCorpus:
    @pytest.mark.parametrize("path", _fixture_kernels(), ids=lambda p: p.name)
    def test_fixture_kernels(self, path: Path) -> None:
        """The fixture kernels that do not cheat pass (wrong or crashing ones included)."""
        assert static_findings(path.read_text()) == []

    @pytest.mark.parametrize(("where", "src"), _embedded(), ids=lambda v: str(v)[:60])
    def test_embedded_kernels(self, where: str, src: str) -> None:
        """Kernels embedded in tests and prompts pass."""
        assert static_findings(src) == [], where

    @pytest.mark.parametrize(("where", "src"), _knowledge_blocks(), ids=lambda v: str(v)[:40])
    def test_knowledge_base_blocks(self, where: str, src: str) -> None:
        """The knowledge base's code blocks (what the model copies) pass."""
        assert static_findings(src) == [], where

    def test_corpus_is_not_empty(self) -> None:
        """The corpus really holds kernels (a glob that finds nothing proves nothing)."""
        assert len(_fixture_kernels()) >= 10 and len(_embedded()) >= 5
        assert len(_knowledge_blocks()) >= 2


class TestLoweringOutput:
    def test_lowered_kernels_pass(self) -> None:
        """The lowering's kernels for every module its tests convert pass the rules."""
        from tests.lowering import test_lowering_sim as cases
        from tests.lowering.lowering_support import (
            lower_ok,
            make_task,
            module_source,
        )

        tasks = [cases._task(e, cases.RAGGED, "float32")[0]
                 for table in (cases.POINTWISE, cases.ROWWISE) for e in table.values()]
        tasks += [make_task(module_source(expr, args="x, y"), shapes)
                  for expr, shapes, _ in cases.MATMUL.values()]
        tasks += [make_task(module_source(expr, init=init.replace("DIM", "200")), [(2, 70, 200)])
                  for expr, init in cases.LINEARS.values()]
        tasks += [make_task(module_source(expr, init=init), [shape])
                  for expr, shape, init in cases.MIDDLE_AND_NCHW.values()]
        tasks += [make_task((ROOT / "examples" / name).read_text(), [shape], entry=entry,
                            init_args=init)
                  for name, (entry, init, shape) in cases.EXAMPLES.items()]
        refused = {}
        for task in tasks:
            lowered = lower_ok(task)
            findings = static_findings(lowered.source)
            if findings:
                refused[task.reference_source[-80:]] = [f.reason for f in findings]
        assert len(tasks) >= 40 and refused == {}
