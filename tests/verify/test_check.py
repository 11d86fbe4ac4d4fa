"""verify.check: the one place a verdict is assembled; a backend supplies only its child."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nkibot
from nkibot.backends.sim import SimBackend
from nkibot.task import InputSpec, Task
from nkibot.verify.check import KernelChild, check
from nkibot.verify.client import HarnessReply
from nkibot.verify.reference import ReferenceSet, compute_reference

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
PACKAGE = Path(nkibot.__file__).parent


def _judge_callers() -> list[str]:
    """Modules that call `judge` or import it from verify.judge (other than its own)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel == "verify/judge.py":
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            called = isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "judge")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "judge"))
            imported = isinstance(node, ast.ImportFrom) and node.module == "nkibot.verify.judge" \
                and any(a.name == "judge" for a in node.names)
            if called or imported:
                found.append(rel)
    return sorted(set(found))


def test_only_check_reaches_a_verdict() -> None:
    """verify/check.py is the only module that calls judge: no second place assembles a
    verdict (the backends, the CLI, MCP, the re-profile and the loop's tools go through it)."""
    assert _judge_callers() == ["verify/check.py"]


@pytest.fixture(scope="module")
def relu() -> Iterator[tuple[Task, ReferenceSet]]:
    path = KERNELS / "relu_ref.py"
    task = Task.model_validate({
        "reference_source": path.read_text(), "entry_point": "Model",
        "source_path": "relu_ref.py", "reference_file": str(path), "has_get_inputs": True,
        "compile_timeout_s": 20, "inputs": [InputSpec(name="x", shape=(256, 64))]})
    with compute_reference(task) as ref:
        yield task, ref


def test_a_backend_supplies_only_how_its_child_runs(relu: tuple[Task, ReferenceSet]) -> None:
    """check runs the static rules, resolves the function and drives both observed runs
    through the child the backend gave; the backend's child sees only the shared request."""
    task, ref = relu
    src = (KERNELS / "relu_ok.py").read_text()
    inner = SimBackend().child(src, task)
    requests: list[dict[str, Any]] = []

    def recording(request: dict[str, Any], out_dir: Path, readable: tuple[Path, ...]
                  ) -> HarnessReply:
        requests.append(request)
        return inner.run(request, out_dir, readable)

    result = check(src, task, ref, KernelChild(run=recording))
    assert result.passed, result.reasons
    assert len(requests) == 2  # the run judged, and the determinism re-run
    assert {r["op"] for r in requests} == {"run_kernel"}
    assert {r["function"] for r in requests} == {"relu_kernel"}
    assert all(len(r["trials"]) == len(ref.trials) for r in requests)
    # Nothing reaches a child for a kernel the static rules refuse.
    requests.clear()
    refused = check("import torch\n" + src, task, ref, KernelChild(run=recording))
    assert not refused.passed and requests == []


def test_the_package_exports_the_front_door() -> None:
    """`from nkibot.verify import check_kernel, KernelChild` reaches verify/check.py."""
    import nkibot.verify
    from nkibot.verify import check as module

    assert nkibot.verify.check_kernel is module.check_kernel
    assert nkibot.verify.KernelChild is KernelChild
