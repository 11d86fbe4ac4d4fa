"""A local `nkibot convert` loads only what it uses: no AWS SDK, no GitHub client, no service,
no torch (the user's module runs in sandboxed children only), no ml_dtypes, no
libcst.matchers.

The conversion runs for real, as a subprocess (`--model auto` with no credentials: the
lowering alone, which declines this module before any reference runs), and the process
reports the modules it loaded on its way out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Erfinv has no lowering: the lowering declines in its preflight, so the run is short.
MODULE = ("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
          "    def forward(self, x):\n        return torch.erfinv(x)\n\n\n"
          "def get_inputs():\n    return [torch.rand(4, 8)]\n\n\n"
          "def get_init_inputs():\n    return []\n")
RUN = ("import json, sys\nfrom nkibot.cli import main\ntry:\n    main()\nexcept SystemExit:\n"
       "    pass\nprint('MODULES ' + json.dumps(sorted(sys.modules)))\n")
#: Top-level packages a local convert never uses, and the service's own modules.
NOT_LOADED = ("boto3", "botocore", "githubkit", "fastapi", "starlette", "uvicorn", "anthropic",
              "mcp", "moto", "torch", "sympy",
              # 0.45 s of CPU; only kernels (children) and bf16/fp8 arrays need it
              "ml_dtypes")
SERVICE = ("nkibot.bot.app", "nkibot.bot.dispatcher", "nkibot.handlers", "nkibot.jobs.factory",
           "nkibot.jobs.queue", "nkibot.jobs.sqlite", "nkibot.jobs.sqs", "nkibot.jobs.state",
           "nkibot.runner.worker", "nkibot.mcp.server", "nkibot.github.client",
           "nkibot.github.gateway",
           # libcst's matchers (0.17 s of CPU): discovery walks the tree with a visitor
           "libcst.matchers")


def test_a_local_convert_imports_no_sdk_client_or_service_module(tmp_path: Path) -> None:
    (tmp_path / "erf.py").write_text(MODULE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NKIBOT_", "ANTHROPIC_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path))  # no ~/.aws: no AWS region
    argv = [sys.executable, "-c", RUN, "convert", f"{tmp_path / 'erf.py'}::Model",
            "--out", str(tmp_path / "out")]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES "))
    loaded = set(json.loads(line.removeprefix("MODULES ")))
    assert proc.stdout.startswith("DECLINED"), proc.stdout + proc.stderr
    assert "nkibot.convert.pipeline" in loaded  # it did convert
    found = sorted(m for m in loaded if m.split(".")[0] in NOT_LOADED
                   or any(m == s or m.startswith(s + ".") for s in SERVICE))
    assert found == []
