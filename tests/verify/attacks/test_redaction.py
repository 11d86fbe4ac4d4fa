"""Attack class 1 (publication): a secret user code got hold of never comes back verbatim.

User code (a reference module, a kernel, a model's reply) plants the runner's fake secrets
and key-shaped strings in exception messages and text; every surface that publishes is
checked end to end against the GitHub double: the check run and reply of a real runner
job, a PR body and its commit, a dispatcher comment, the verdict of `nkibot verify`, and
the log pipeline.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from pydantic import SecretStr
from typer.testing import CliRunner

from nkibot import redact
from nkibot.cli import app
from nkibot.config.hygiene import register_secrets
from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from nkibot.github.gateway import GitHubGateway
from nkibot.github.publish import Publisher, plan_publication
from nkibot.logging import configure
from tests.fakes.github import GitHubDouble
from tests.github import sample_results as S
from tests.runner.test_worker import (
    INSTALLATION,
    REPO,
    drain,
    enqueue,
    make_job,
    only_run,
    runner_for,
)

ROOT = Path(__file__).resolve().parents[3]
WEBHOOK = "fake-webhook-secret-7f3a9c2e"
ANTHROPIC = "sk-ant-api03-" + "F4k3" * 10
#: Key-shaped strings nobody registered: the shapes alone must go.
SHAPED = ("ghs_" + "T0k3n" * 6, "AKIA" + "FAKEKEYID0123456", "github_pat_" + "P4t" * 10)


@pytest.fixture()
def held(github_settings: Settings) -> Iterator[Settings]:
    """The runner's settings with fake secrets, registered as `nkibot runner` does."""
    settings = github_settings.model_copy(update={
        "webhook_secret": SecretStr(WEBHOOK), "anthropic_api_key": SecretStr(ANTHROPIC)})
    register_secrets(settings, [])
    yield settings
    redact.forget_all()


def _planted(settings: Settings) -> list[str]:
    pem = settings.private_key_pem() or ""
    key_line = next(ln for ln in pem.splitlines() if len(ln) > 40 and "-----" not in ln)
    return [WEBHOOK, ANTHROPIC, key_line, *SHAPED]


def _assert_clean(text: str, secrets: list[str]) -> None:
    assert "[redacted]" in text, "the planted text never reached this surface"
    for secret in secrets:
        assert secret not in text, secret


class TestRunnerJob:
    def test_reference_exception_is_redacted_in_check_run_and_reply(
            self, github_double: GitHubDouble, held: Settings) -> None:
        """A user module that raises with the runner's secrets: check run and reply carry
        the failure, never the values."""
        secrets = _planted(held)
        module = ("import torch\nfrom torch import nn\n\n\nclass Leaky(nn.Module):\n"
                  "    def forward(self, x):\n"
                  f"        raise RuntimeError('stolen: {' '.join(secrets)}')\n\n\n"
                  "def get_inputs():\n    return [torch.randn(8, 8)]\n")
        repo = github_double.add_repo(REPO, {"src/leaky.py": module}, installation_id=INSTALLATION)
        github_double.add_issue(REPO, 5)
        runner = runner_for(held)
        enqueue(runner, make_job(repo.refs["heads/main"], "src/leaky.py::Leaky"))
        drain(runner)
        run = only_run(github_double)
        published = json.dumps(run)
        assert run["conclusion"] == "failure" and "stolen" in published
        _assert_clean(published, secrets)
        (reply,) = github_double.comments_on(REPO, 5)
        assert "stolen" in reply["body"]
        _assert_clean(reply["body"], secrets)


class TestPublishLayer:
    def test_pr_body_and_commit_are_redacted(self, github_double: GitHubDouble,
                                             held: Settings) -> None:
        """A model's reply and kernel that echo secrets: the PR body and files are clean."""
        secrets = _planted(held)
        repo = github_double.add_repo(REPO, {"src/norm.py": "class RMSNorm: ...\n"},
                                      installation_id=3)
        base = S.simulated()
        kernel = base.kernel.model_copy(update={  # type: ignore[union-attr]
            "source": base.kernel.source + f"\n# {' '.join(secrets)}\n"})  # type: ignore[union-attr]
        turns = [t.model_copy(update={"text": f"{t.text} leaked {' '.join(secrets)}"})
                 for t in base.transcript]
        result = base.model_copy(update={"kernel": kernel, "transcript": turns,
                                         "reasons": [f"note {secrets[0]}"]})
        job = make_job(repo.refs["heads/main"]).model_copy(update={"installation_id": 3})
        plan = plan_publication(job, result, output_dir="nki_kernels/",
                                reference_path="src/norm.py", entry="RMSNorm", date="2026-01-01",
                                check_run_url="https://github.com/checks/1")
        assert any(s in plan.pr_body or any(s in f for f in plan.files.values()) for s in secrets)
        asyncio.run(Publisher(installation_client(held, 3)).publish(plan))
        (pr,) = github_double.repo(REPO).pulls.values()
        files = github_double.files_at(REPO, plan.branch)
        kernel_file = next(v for k, v in files.items() if k.endswith("_nki.py") and "test_" not
                           in k).decode()
        _assert_clean(kernel_file, secrets)
        for secret in secrets:
            assert secret not in pr.body

    def test_dispatcher_comment_is_redacted(self, github_double: GitHubDouble,
                                            held: Settings) -> None:
        """The dispatcher's gateway posts comments through the same redacting client."""
        secrets = _planted(held)
        github_double.add_repo(REPO, {"a.py": ""}, installation_id=INSTALLATION)
        github_double.add_issue(REPO, 5)
        gateway = GitHubGateway(installation_client(held, INSTALLATION))
        asyncio.run(gateway.comment(REPO, 5, f"echo {' '.join(secrets)}"))
        (comment,) = github_double.comments_on(REPO, 5)
        _assert_clean(comment["body"], secrets)


KERNEL = """import nki
import nki.language as nl


@nki.jit
def relu_kernel(x):
    raise ValueError("SECRETS")
"""


class TestVerdict:
    def test_kernel_exception_is_redacted_in_the_verdict(self, tmp_path: Path,
                                                         held: Settings) -> None:
        """A kernel that raises with secrets: `nkibot verify --json` reasons are clean."""
        secrets = _planted(held)
        kernel = tmp_path / "leak.py"
        kernel.write_text(KERNEL.replace("SECRETS", " ".join(secrets)))
        target = f"{ROOT / 'tests' / 'fixtures' / 'kernels' / 'relu_ref.py'}::Model"
        result = CliRunner().invoke(app, ["verify", target, "--kernel", str(kernel), "--json",
                                          "--trials", "1"])
        assert result.exit_code == 1, result.output
        out = json.loads(result.stdout)
        assert any("ValueError" in str(r) for r in out["reasons"]), out["reasons"]
        _assert_clean(result.stdout, secrets)


class TestLogs:
    def test_structlog_and_stdlib_lines_are_redacted(self, held: Settings,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
        """Log fields, nested data, exceptions and stdlib records lose the values."""
        secrets = _planted(held)
        handlers = list(logging.root.handlers)
        try:
            configure("info", json=True)
            log = structlog.get_logger()
            log.info("job failed", reason=f"boom {secrets[0]}", data={"k": [secrets[1]]},
                     error=RuntimeError(secrets[2]), note=" ".join(secrets[3:]))
            logging.getLogger("uvicorn.error").error("request body %s", " ".join(secrets))
        finally:
            structlog.reset_defaults()
            logging.root.handlers[:] = handlers
        _assert_clean(capsys.readouterr().err, secrets)
