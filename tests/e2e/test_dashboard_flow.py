"""The Scope gate end to end: `/nki scan`, the dashboard issue, ticks, unticks, refusals."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from nkibot.handlers.dashboard import END, START, TITLE, checked_targets, parse_board
from tests.e2e.conftest import REPO, SENDER, Stack
from tests.fakes.github_fixtures import load_webhook, signed_headers

NORM = "src/models/norm.py::RMSNorm"
CONV = "src/models/conv.py::Conv"
#: The one target the lowering cannot cover: it needs a model, so it ranks last.
SPECIAL = "src/models/special.py::InverseErf"
CUDA_SOURCE = (Path(__file__).resolve().parent.parent / "fixtures" / "repos"
               / "cuda_rmsnorm.cu").read_text()
NOTE = "Team note: do RMSNorm first, Conv can wait."


def dashboards(stack: Stack) -> list[tuple[int, dict[str, Any]]]:
    issues = stack.github.repo(REPO).issues
    return [(n, i) for n, i in sorted(issues.items()) if i["title"] == TITLE]


def the_dashboard(stack: Stack) -> tuple[int, str]:
    (found,) = dashboards(stack)
    return found[0], found[1]["body"]


def edit_issue(stack: Stack, number: int, body: str, sender: str = SENDER) -> int:
    """A user's edit of issue `number` (as GitHub does it), and its `issues.edited` webhook."""
    issue = stack.github.repo(REPO).issues[number]
    before, issue["body"] = issue["body"], body
    _headers, raw = load_webhook("issues_edited")
    payload = json.loads(raw)
    payload["issue"].update(number=number, title=issue["title"], body=body)
    payload["changes"] = {"body": {"from": before}}
    payload["sender"]["login"] = sender
    data = json.dumps(payload).encode()
    resp = httpx.post(f"{stack.url}/webhook", content=data, timeout=30,
                      headers=signed_headers(data, "issues", str(uuid.uuid4())))
    return resp.status_code


def tick(body: str, target: str, on: bool = True) -> str:
    old, new = ("[ ]", "[x]") if on else ("[x]", "[ ]")
    line = next(x for x in body.splitlines() if f"`{target}`" in x and x.startswith("- "))
    return body.replace(line, line.replace(old, new, 1))


def scan(stack: Stack, command: str = "/nki scan") -> None:
    stack.comment(command)
    assert stack.dispatch() == 1


class TestDashboardFlow:
    def test_scan_creates_the_pinned_dashboard(self, stack: Stack) -> None:
        """`/nki scan` discovers the default branch's targets into one pinned issue, ranked."""
        scan(stack)
        number, body = the_dashboard(stack)
        assert stack.github.repo(REPO).issues[number].get("pinned") is True
        rows = [x for x in body.splitlines() if x.startswith("- [")]
        assert [r.split("`")[1] for r in rows][-1] == SPECIAL  # needs a model: ranked last
        norm = next(r for r in rows if NORM in r)
        assert "nn.Module" in norm and "`x=4x128xfloat32`" in norm
        assert "0 tokens (lowering)" in norm and norm.startswith("- [ ]")
        assert "needs a model" in next(r for r in rows if SPECIAL in r)
        assert "0 tokens (lowering)" in next(r for r in rows if CONV in r)
        assert f"#{number}" in stack.replies()[-1] and "4 candidates" in stack.replies()[-1]

    def test_second_scan_updates_and_keeps_notes(self, stack: Stack) -> None:
        """A later scan edits the same issue, keeps a human's note, and adds new targets."""
        scan(stack)
        number, body = the_dashboard(stack)
        stack.github.repo(REPO).issues[number]["body"] = f"{NOTE}\n\n{body}\n\nSigned, alice"
        stack.github.commit(REPO, {"kernels/rmsnorm.cu": CUDA_SOURCE})
        stack.comment("/nki scan", comment_id=9002)
        stack.dispatch()
        again, body = the_dashboard(stack)
        assert again == number
        assert body.startswith(NOTE) and body.rstrip().endswith("Signed, alice")
        assert body.count(START) == 1 and body.count(END) == 1
        assert "`kernels/rmsnorm.cu::rms_norm_kernel` · CUDA" in body
        assert "Updated the NKI conversion dashboard" in stack.replies()[-1]

    def test_tick_enqueues_and_completion_updates_the_row(self, stack: Stack) -> None:
        """Ticking a row queues that target; the runner's result lands back in the row."""
        scan(stack)
        number, body = the_dashboard(stack)
        assert edit_issue(stack, number, tick(body, NORM)) == 202
        assert stack.dispatch() == 1
        (run,) = stack.check_runs()
        assert run["status"] == "queued" and run["name"] == f"nkibot: {NORM}"
        _, body = the_dashboard(stack)
        assert checked_targets(body) == {NORM} and "**queued**" in body
        stack.run_jobs()
        (run,) = stack.check_runs()
        assert run["conclusion"] == "success"
        _, body = the_dashboard(stack)
        row = next(x for x in body.splitlines() if f"`{NORM}`" in x)
        assert row.startswith("- [ ]") and "**verified**" in row
        assert "[check run](https://github.com/checks/" in row and "/pull/" in row
        (pr,) = stack.pulls()
        assert f"/pull/{pr.number}" in row
        assert not [r for r in stack.replies() if "Verified NKI kernel" in r]  # row, not comment

    def test_untick_cancels_the_queued_job(self, stack: Stack) -> None:
        """Unticking a queued row cancels its job: cancelled check run, no conversion."""
        scan(stack)
        number, body = the_dashboard(stack)
        edit_issue(stack, number, tick(body, NORM))
        stack.dispatch()
        _, body = the_dashboard(stack)
        edit_issue(stack, number, tick(body, NORM, on=False))
        stack.dispatch()
        (run,) = stack.check_runs()
        assert run["status"] == "completed" and run["conclusion"] == "cancelled"
        _, body = the_dashboard(stack)
        board = parse_board(body)
        assert board is not None and board.row(NORM) is not None
        assert board.row(NORM).status == "cancelled"  # type: ignore[union-attr]
        assert checked_targets(body) == set()
        stack.run_jobs()
        assert not stack.pulls()

    def test_read_only_tick_does_nothing(self, stack: Stack) -> None:
        """A reader's tick enqueues nothing, and the box is put back."""
        stack.github.set_permission(REPO, "bob", "read")
        scan(stack)
        number, body = the_dashboard(stack)
        edit_issue(stack, number, tick(body, NORM), sender="bob")
        stack.dispatch()
        assert stack.check_runs() == []
        _, restored = the_dashboard(stack)
        assert checked_targets(restored) == set() and restored == body

    def test_label_on_an_issue_without_targets_scans(self, stack: Stack) -> None:
        """The trigger label on an issue that names no target builds the dashboard."""
        stack.github.set_permission(REPO, "octocat", "admin")
        _headers, raw = load_webhook("issues_labeled")
        payload = json.loads(raw)
        payload["issue"]["body"] = "Could any of our modules run on Trainium?"
        payload["sender"]["login"] = SENDER
        stack.github.repo(REPO).issues[1]["body"] = payload["issue"]["body"]
        data = json.dumps(payload).encode()
        httpx.post(f"{stack.url}/webhook", content=data, timeout=30,
                   headers=signed_headers(data, "issues", str(uuid.uuid4())))
        stack.dispatch()
        assert len(dashboards(stack)) == 1 and stack.check_runs() == []


    def test_unexpressible_module_is_refused_up_front(self, stack: Stack) -> None:
        """A forward using an op no backend can express fails before any model turn."""
        stack.github.commit(REPO, {"src/models/pick.py": (
            "import torch\nfrom torch import nn\n\n\nclass Pick(nn.Module):\n"
            "    def forward(self, x):\n        return torch.unique(x)\n")})
        scan(stack)
        _, body = the_dashboard(stack)
        assert "⚠️ no backend can express `unique`" in body
        stack.comment("/nki convert src/models/pick.py::Pick --shape x=8xfloat32",
                      comment_id=9003)
        stack.dispatch()
        stack.run_jobs()
        (run,) = stack.check_runs()
        assert run["conclusion"] == "failure" and "no NKI backend can express" in (
            run["output"]["summary"])
