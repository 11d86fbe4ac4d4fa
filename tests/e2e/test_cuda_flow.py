"""A hand-written CUDA RMSNorm converted against its PyTorch reference, end to end."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import REPO, Stack
from tests.e2e.test_claude_flow import claude
from tests.fakes.anthropic import AnthropicDouble, tool_reply

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CUDA_SOURCE = (FIXTURES / "repos" / "cuda_rmsnorm.cu").read_text()
GOOD = (FIXTURES / "kernels" / "rmsnorm_ok.py").read_text()
TARGET = "kernels/rmsnorm.cu::rms_norm_kernel"
REFERENCE = "src/models/norm.py::RMSNorm"


def with_cuda(stack: Stack, references: bool = False) -> None:
    files: dict[str, str | bytes | None] = {"kernels/rmsnorm.cu": CUDA_SOURCE}
    if references:
        files[".github/nki-bot.yml"] = f"references:\n  {TARGET}: {REFERENCE}\n"
    stack.github.commit(REPO, files)


class TestCudaFlow:
    def test_reference_lowered_for_zero_tokens(self, stack: Stack) -> None:
        """A CUDA kernel whose reference the lowering covers converts with no model tokens."""
        with_cuda(stack)
        stack.comment(f"/nki convert {TARGET} --reference {REFERENCE}")
        stack.dispatch()
        stack.run_jobs()
        (run,) = stack.check_runs()
        assert run["name"] == f"nkibot: {TARGET}"
        assert run["conclusion"] == "success", run["output"]["summary"]
        assert "| 1 | 0 / 0 / 0 / 0 |" in run["output"]["summary"]  # one turn, zero tokens
        (pr,) = stack.pulls()
        assert pr.head_ref == "nki/kernels-rmsnorm-cu-rms-norm-kernel"
        assert stack.replies()[-1].startswith("✅ Verified NKI kernel")

    def test_scripted_claude_migration_sees_the_cuda(
            self, stack: Stack, anthropic_double: AnthropicDouble) -> None:
        """The prompt carries the CUDA source and the reference; the scripted kernel verifies."""
        with_cuda(stack, references=True)
        anthropic_double.enqueue(tool_reply("verify_kernel", {"code": GOOD}, text="Ported."))
        stack.comment(f"/nki convert {TARGET} --model claude")
        stack.dispatch()
        stack.run_jobs(**claude(stack, anthropic_double))
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success", run["output"]["summary"]
        first = anthropic_double.requests[0].last_user_text()
        assert "__global__ void __launch_bounds__(256) rms_norm_kernel" in first
        assert "class RMSNorm(nn.Module)" in first and "the reference wins" in first
        files = stack.github.files_at(REPO, "nki/kernels-rmsnorm-cu-rms-norm-kernel")
        assert any(GOOD.strip() in v.decode() for v in files.values())

    def test_missing_reference_gets_a_reply_saying_how(self, stack: Stack) -> None:
        """A CUDA target without a reference queues nothing and explains how to name one."""
        with_cuda(stack)
        stack.comment(f"/nki convert {TARGET}")
        stack.dispatch()
        assert stack.check_runs() == []
        reply = stack.replies()[-1]
        assert "--reference models/norm.py::RMSNorm" in reply and "references:" in reply
