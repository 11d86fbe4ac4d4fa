"""Our own attacks on the verifier, one file per class of issue 11.

Each attack is a real kernel (or module) run through the real verifier: the sandboxed,
torch-free kernel child under bubblewrap, judged by the parent. The static rules are
skipped (`skip_static=True`) so that every attack reaches the sandbox: these tests show
the dynamic layer holds on its own. A probe kernel reports what it managed to do by
raising `FINDINGS {json}` at import, which comes back as the verdict's first reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nkibot.backends.sim import SimBackend
from nkibot.results import VerifyResult
from nkibot.task import InputSpec, Task
from nkibot.verify import isolation
from nkibot.verify.check import check
from nkibot.verify.reference import ReferenceSet, compute_reference

KERNELS = Path(__file__).resolve().parents[2] / "fixtures" / "kernels"
HERE = Path(__file__).resolve().parent

#: An honest ReLU for x of shape (256, 64); attacks are prepended or spliced into it.
RELU = '''
import nki
import nki.language as nl


@nki.jit
def relu_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        tile = nl.load(x[i * 128:(i + 1) * 128, 0:64])
        nl.store(out[i * 128:(i + 1) * 128, 0:64], value=nl.relu(tile))
    return out
'''

#: Prepended to a probe: `found` collects results, `report()` raises them.
PROBE = '''
import json as _json
found = {}


def attempt(name, action):
    try:
        found[name] = "ok: " + str(action())[:60]
    except BaseException as exc:
        found[name] = "refused: " + type(exc).__name__


def report():
    raise RuntimeError("FINDINGS " + _json.dumps(found))
'''


def task_for(ref: str, entry: str = "Model", shape: tuple[int, ...] = (256, 64),
             **fields: Any) -> Task:
    path = KERNELS / ref if (KERNELS / ref).exists() else HERE / ref
    return Task.model_validate({
        "reference_source": path.read_text(), "entry_point": entry, "source_path": ref,
        "reference_file": str(path), "has_get_inputs": True, "compile_timeout_s": 20,
        "inputs": [InputSpec(name="x", shape=shape)], **fields})


@pytest.fixture(scope="session")
def full_isolation() -> isolation.Isolation:
    found = isolation.current()
    assert found.level == "full", (
        f"these attacks need the full sandbox ({found.describe()}); .ci/run installs "
        "bubblewrap and runs them as root")
    return found


@pytest.fixture(scope="session")
def relu_task() -> Task:
    return task_for("relu_ref.py")


@pytest.fixture(scope="session")
def relu_ref(relu_task: Task, full_isolation: isolation.Isolation
             ) -> Iterator[ReferenceSet]:
    with compute_reference(relu_task) as ref:
        yield ref


def verify(src: str, task: Task, reference: ReferenceSet, function: str = "relu_kernel",
           **kw: Any) -> VerifyResult:
    backend = SimBackend(skip_static=True, function=function, **kw)
    return check(src, task, reference, backend.child(src, task))


def findings(result: VerifyResult) -> dict[str, str]:
    """The probe's report from the verdict's reasons (it fails the kernel on purpose)."""
    assert not result.passed
    for reason in result.reasons:
        match = re.search(r"FINDINGS (\{.*\})", reason)
        if match:
            return dict(json.loads(match[1]))
    raise AssertionError(f"the probe reported nothing: {result.reasons}")
