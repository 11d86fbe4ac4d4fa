"""The repo's performance requirement, end to end (lowering model, simulator, GitHub double):
a verified kernel that misses `min_roofline_fraction` gets a neutral check run saying by how
much, with the cost model's labelled Performance section, and its pull request is a draft."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nkibot.config.settings import Settings
from tests.e2e.conftest import REPO, Stack, serve_stack
from tests.fakes.github import GitHubDouble

TARGET = "src/models/norm.py::RMSNorm"


def _stack(github_double: GitHubDouble, github_settings: Settings, config: str) -> Iterator[Stack]:
    yield from serve_stack(github_double, github_settings, config)


@pytest.fixture
def strict(github_double: GitHubDouble, github_settings: Settings) -> Iterator[Stack]:
    yield from _stack(github_double, github_settings,
                      "integrate: dispatch\nrequirements:\n  min_roofline_fraction: 0.99\n")


@pytest.fixture
def lenient(github_double: GitHubDouble, github_settings: Settings) -> Iterator[Stack]:
    yield from _stack(github_double, github_settings,
                      "requirements:\n  min_roofline_fraction: 0.0001\n")


def _convert(stack: Stack) -> dict[str, object]:
    stack.comment(f"/nki convert {TARGET}")
    assert stack.dispatch() == 1
    stack.run_jobs()
    (run,) = stack.check_runs()
    return run


def test_a_missed_requirement_is_neutral_and_a_draft(strict: Stack) -> None:
    run = _convert(strict)
    assert run["conclusion"] == "neutral"
    summary = str(run["output"]["summary"])  # type: ignore[index]
    assert "`min_roofline_fraction 0.99`: **not met**" in summary
    assert "short by" in summary and "vs required 0.99" in summary
    assert "### Performance" in summary and "model estimate (trn1), not a measurement" in summary
    assert "Engine utilisation" in summary
    files = strict.github.files_at(REPO, "nki/src-models-norm-rmsnorm")
    header = files["nki_kernels/norm_rms_norm_nki.py"].decode()
    assert "# modelled time: " in header and "(model estimate (trn1), not a measurement)" in header
    (pr,) = strict.pulls()
    assert pr.draft


def test_a_met_requirement_stays_green(lenient: Stack) -> None:
    run = _convert(lenient)
    assert run["conclusion"] == "success"
    assert "`min_roofline_fraction 0.0001`: met" in str(run["output"]["summary"])  # type: ignore[index]
    (pr,) = lenient.pulls()
    assert not pr.draft
