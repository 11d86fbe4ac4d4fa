"""Shared pieces for the loop, pipeline and CLI tests: one small task, its reference, kernels.

The task and its reference are computed once per session through the real harness
(sandboxed subprocesses), so each loop test only pays for the kernels it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.results import KernelArg
from nkibot.task import Task
from nkibot.verify.sandbox import SandboxOutcome, run_sandboxed
from tests.fakes.anthropic import AnthropicDouble

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
'''

GOOD = '''import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def model_kernel(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for i in nl.affine_range(N // P):
        t = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * P:(i + 1) * P, 0:D])
        a = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=a, op=nl.tanh, data=t)
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=a, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, 0:D], src=y)
    return out
'''

#: Turn 1 of the episode: an API that does not exist.
WRONG_API = GOOD.replace("nisa.activation(dst=a, op=nl.tanh", "nisa.activate(dst=a, op=nl.tanh")

#: Turn 2: the whole 256-row input in one tile (partition dimension over 128).
WRONG_TILE = '''import nki
import nki.language as nl
import nki.isa as nisa


@nki.jit
def model_kernel(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray((N, D), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=a, op=nl.tanh, data=t)
    nisa.dma_copy(dst=out, src=a)
    return out
'''

#: A kernel that exhausts the sandbox's memory limit before doing any work.
MEMORY_HOG = GOOD.replace("    N, D = x.shape\n",
                          "    N, D = x.shape\n    hog = [0.0] * (1 << 34)\n")

#: Turn 3: compiles, but scales by 3 instead of 2.
NUMERIC_BUG = GOOD.replace("operand0=2.0", "operand0=3.0")


class Children:
    """The real sandbox runner, recording which kernel sources each child op ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def __call__(self, argv: list[str], stdin: bytes, **kw: Any) -> SandboxOutcome:
        request = json.loads(stdin)
        op = ("verify" if "order" in request else "cost" if request.get("cost_only")
              else "profile" if "cost_model" in request else "compile")
        self.ran.append((op, request.get("source", "")))
        return run_sandboxed(argv, stdin, **kw)

    def ops(self, source: str) -> list[str]:
        return [op for op, src in self.ran if src == source]


@dataclass
class SimTask:
    task: Task
    reference: object
    args: list[KernelArg]
    path: Path


@pytest.fixture(scope="session")
def sim_task(tmp_path_factory: pytest.TempPathFactory) -> SimTask:
    """The tanh*2 task over a 256x64 input, loaded and referenced by the real harness."""
    from nkibot.convert.taskload import load_task
    from nkibot.task import describe_kernel_args
    from nkibot.verify.reference import compute_reference

    path = tmp_path_factory.mktemp("ref") / "scale.py"
    path.write_text(REFERENCE, encoding="utf-8")
    task = load_task(path, "Model", turns=6, display_path="scale.py")
    return SimTask(task, compute_reference(task), describe_kernel_args(task), path)


@pytest.fixture
def sim_backend() -> Any:
    from nkibot.backends.sim import SimBackend

    return SimBackend()


@pytest.fixture
def claude_settings(anthropic_double: AnthropicDouble) -> Callable[..., Settings]:
    """Settings pointing the real SDK at the double; keyword overrides for budgets."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = dict(
            anthropic_api_key=SecretStr(anthropic_double.api_key),
            anthropic_base_url=anthropic_double.base_url, anthropic_max_retries=0,
            anthropic_model="claude-test")
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return make
