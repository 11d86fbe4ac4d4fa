"""Idempotency and path safety across the whole flow."""

from __future__ import annotations

import io
import tarfile

import pytest

from nkibot.jobs.sqlite import SqliteQueue
from tests.e2e.conftest import REPO, Stack


class TestIdempotency:
    def test_same_delivery_twice_is_one_job(self, stack: Stack) -> None:
        """A redelivered webhook is acknowledged but yields one job and one check run."""
        first, delivery = stack.comment("/nki convert src/models/norm.py::RMSNorm",
                                        comment_id=9001)
        again, _ = stack.comment("/nki convert src/models/norm.py::RMSNorm", delivery=delivery,
                                 comment_id=9001)
        assert (first, again) == (202, 202)
        stack.dispatch()
        jobs = stack.runner().queue
        assert isinstance(jobs, SqliteQueue) and jobs.count() == 1
        assert len(stack.check_runs()) == 1

    def test_retry_updates_the_pull_request(self, stack: Stack) -> None:
        """/nki retry runs again, completes a new check run and edits the same PR."""
        stack.comment("/nki convert src/models/norm.py::RMSNorm", comment_id=1)
        stack.dispatch()
        stack.run_jobs()
        (pr,) = stack.pulls()
        pr.body = "edited by hand"
        stack.comment("/nki retry", comment_id=2)
        stack.dispatch()
        stack.run_jobs()
        runs = stack.check_runs()
        assert len(runs) == 2 and all(r["conclusion"] == "success" for r in runs)
        (same,) = stack.pulls()
        assert same.number == pr.number and "### Verification" in same.body
        assert len([r for r in stack.replies() if r.startswith("✅")]) == 2


class TestPathSafety:
    @pytest.mark.parametrize("target", ["../../etc/passwd::X", "/etc/passwd::X"])
    def test_escaping_targets_are_refused(self, stack: Stack, target: str) -> None:
        """Targets outside the repository are refused with a reply; no job is queued."""
        stack.comment(f"/nki convert {target}")
        stack.dispatch()
        assert not stack.check_runs()
        reply = stack.replies()[-1]
        assert "etc/passwd" in reply and ("`..`" in reply or "relative" in reply)

    def test_tarball_with_links_is_refused(self, stack: Stack) -> None:
        """A repository archive with a symlink fails the check run with a clear reply."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("acme-models-abc/src/models/norm.py")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
            tar.addfile(info)
        stack.github.repo(REPO).tarball = lambda _sha: buf.getvalue()  # type: ignore[method-assign]
        stack.comment("/nki convert src/models/norm.py::RMSNorm")
        stack.dispatch()
        stack.run_jobs()
        (run,) = stack.check_runs()
        assert run["conclusion"] == "failure" and "is a link" in run["output"]["summary"]
        assert "archive was refused" in stack.replies()[-1]
