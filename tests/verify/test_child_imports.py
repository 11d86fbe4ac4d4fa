"""What the sandboxed children load: each child pays its imports before any work.

Every check runs the child's real entry in a fresh interpreter (a subprocess, outside the
sandbox: these are our own modules and a trusted example) and reads its `sys.modules`.
bench/time_to_verdict.py measures what these imports cost per child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A Linear: torch's formula counts 2 * 8 * 64 * 32 FLOPs for its matmul.
MODULE = ("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
          "    def __init__(self):\n        super().__init__()\n"
          "        self.fc = nn.Linear(64, 32)\n\n"
          "    def forward(self, x):\n        return torch.relu(self.fc(x))\n\n\n"
          "def get_inputs():\n    return [torch.randn(8, 64)]\n")
REFERENCE = ("import json, sys\nfrom nkibot.verify.harness import _dispatch\n"
             "reply = _dispatch(json.loads(sys.argv[1]))\n"
             "print(json.dumps({'reply': reply, 'modules': sorted(sys.modules)}))\n")
KERNEL = ("import json, sys\nfrom nkibot.verify import harness\n"
          "from nkibot.verify.children import kernel_side\nfrom nkibot.sim import activate\n"
          "with activate(target='trn1'):\n    import nki\n"
          "print(json.dumps(sorted(sys.modules)))\n")


def _run(code: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def _reference_request(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "fc.py").write_text(MODULE, encoding="utf-8")
    dirs = {}
    for name in ("inputs_dir", "state_dir", "expected_dir"):
        dirs[name] = str(tmp_path / name)
        (tmp_path / name).mkdir()
    return {"op": "reference", "reference_path": str(tmp_path / "fc.py"),
            "entry_point": "Model", "init_args": [], "init_kwargs": {},
            "inputs": [{"name": "x", "shape": [8, 64], "dtype": "float32"}],
            "has_get_inputs": True,
            "plan": [{"seed": 1, "label": "normal", "kind": None},
                     {"seed": 2, "label": "normal", "kind": None}], **dirs}


def test_the_reference_child_counts_flops_without_importing_dynamo(tmp_path: Path) -> None:
    """The FLOP count (trial 0) is torch's formula's, and TorchDynamo (with sympy and
    inductor: 1-1.5 s of CPU per reference child) is never imported for it; nor is
    ml_dtypes for a float32 module."""
    out = json.loads(_run(REFERENCE, json.dumps(_reference_request(tmp_path)), cwd=tmp_path))
    assert out["reply"]["ok"], out["reply"]
    assert out["reply"]["trials"][0]["flops"] == 2 * 8 * 64 * 32
    assert "torch" in out["modules"]  # it did run the module
    loaded = [m for m in out["modules"] if m.split(".")[:2] in (["torch", "_dynamo"],
                                                                ["torch", "_inductor"])
              or m in ("sympy", "ml_dtypes")]
    assert loaded == []  # ml_dtypes (0.45 s of CPU) too: this module has no bf16 or fp8


def test_the_kernel_child_loads_no_torch_libcst_or_pydantic(tmp_path: Path) -> None:
    """A kernel child is NumPy, ml_dtypes and the simulator (torch is not even in its
    view); nothing of the parent's (libcst, pydantic, convert, lowering) rides along."""
    loaded = json.loads(_run(KERNEL, cwd=tmp_path))
    assert "nkibot.sim.runtime" in loaded and "nkibot.verify.children.kernel_side" in loaded
    heavy = ("torch", "libcst", "pydantic", "structlog", "scipy", "sympy")
    assert [m for m in loaded if m.split(".")[0] in heavy] == []
    assert [m for m in loaded if m.startswith(("nkibot.convert", "nkibot.lowering",
                                               "nkibot.backends", "nkibot.github"))] == []


@pytest.mark.parametrize("build", ["linear", "conv", "bmm", "convtranspose", "attention"])
def test_flop_count_is_torchs(build: str) -> None:
    """`FlopCount` gives FlopCounterMode's total on the ops a reference uses."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from nkibot.verify.children.flops import FlopCount

    torch.manual_seed(0)
    cases = {
        "linear": (torch.nn.Linear(64, 32), [torch.randn(8, 64)]),
        "conv": (torch.nn.Conv2d(3, 8, 3), [torch.randn(2, 3, 16, 16)]),
        "bmm": (torch.bmm, [torch.randn(2, 4, 5), torch.randn(2, 5, 6)]),
        "convtranspose": (torch.nn.ConvTranspose2d(4, 2, 3), [torch.randn(1, 4, 8, 8)]),
        "attention": (lambda q: F.softmax(q @ q.transpose(-1, -2), -1) @ q,
                      [torch.randn(2, 16, 8)]),
    }
    fn, args = cases[build]
    with torch.no_grad():
        with FlopCount() as ours:
            fn(*args)
        with FlopCounterMode(display=False) as theirs:
            fn(*args)
    assert ours.total == theirs.get_total_flops() > 0


def test_ml_dtypes_types_resolve_on_first_use(tmp_path: Path) -> None:
    """The dtype table names bfloat16 and fp8 without importing ml_dtypes; looking one up
    imports it, and bf16 arrays then round-trip through their raw bits."""
    code = ("import json, sys\nimport numpy as np\n"
            "from nkibot.verify import protocol\n"
            "before = 'ml_dtypes' in sys.modules\n"
            "known = ['bfloat16' in protocol.NUMPY_DTYPES, len(protocol.NUMPY_DTYPES)]\n"
            "names = [protocol.dtype_name(np.dtype(np.float32)),"
            " protocol.dtype_name(np.dtype(np.int64))]\n"
            "still = 'ml_dtypes' in sys.modules\n"
            "a = np.arange(6, dtype=np.float32).astype(protocol.NUMPY_DTYPES['bfloat16'])\n"
            "d = protocol.save_array(__import__('pathlib').Path(sys.argv[1]) / 'a.npy', a)\n"
            "back = protocol.load_array(d)\n"
            "print(json.dumps([before, known, names, still, d['dtype'],"
            " protocol.dtype_name(np.dtype(__import__('ml_dtypes').float8_e4m3)),"
            " back.astype(np.float32).tolist()]))\n")
    out = json.loads(_run(code, str(tmp_path), cwd=tmp_path))
    assert out == [False, [True, 14], ["float32", "int64"], False, "bfloat16", "float8_e4m3",
                   [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]
