"""The GitHub double's wider surface (used by the runner): git data, pulls, tarballs.

Every call goes through githubkit, so each response also passes githubkit's models.
"""

from __future__ import annotations

import io
import tarfile

import httpx
import pytest
from githubkit import GitHub
from githubkit.exception import RequestFailed

from nkibot.config.settings import Settings
from nkibot.github.client import installation_client
from tests.fakes.github import GitHubDouble

REPO = ("acme", "kernels")


@pytest.fixture
def gh(github_double: GitHubDouble, github_settings: Settings) -> GitHub:  # type: ignore[type-arg]
    github_double.add_repo("acme/kernels", {"src/a.py": "A = 1\n", "README.md": "hi\n"},
                           installation_id=9)
    return installation_client(github_settings, 9)


class TestGitData:
    async def test_commit_branch_and_fast_forward_rules(self, gh: GitHub,  # type: ignore[type-arg]
                                                        github_double: GitHubDouble) -> None:
        """Blobs, trees (with base_tree), commits and refs; non-fast-forward needs force."""
        main = github_double.repo("acme/kernels").refs["heads/main"]
        base_tree = (await gh.rest.git.async_get_commit(*REPO, main)).parsed_data.tree.sha
        blob = (await gh.rest.git.async_create_blob(*REPO, content="K = 2\n",
                                                    encoding="utf-8")).parsed_data
        tree = (await gh.rest.git.async_create_tree(*REPO, base_tree=base_tree, tree=[
            {"path": "nki_kernels/k.py", "mode": "100644", "type": "blob", "sha": blob.sha}],
        )).parsed_data
        commit = (await gh.rest.git.async_create_commit(
            *REPO, message="Add kernel", tree=tree.sha, parents=[main])).parsed_data
        await gh.rest.git.async_create_ref(*REPO, ref="refs/heads/nki/k", sha=commit.sha)
        files = github_double.files_at("acme/kernels", "nki/k")
        assert files["nki_kernels/k.py"] == b"K = 2\n" and files["src/a.py"] == b"A = 1\n"
        with pytest.raises(RequestFailed) as info:
            await gh.rest.git.async_update_ref(*REPO, "heads/nki/k", sha=main)
        assert info.value.response.status_code == 422
        await gh.rest.git.async_update_ref(*REPO, "heads/nki/k", sha=main, force=True)
        await gh.rest.git.async_update_ref(*REPO, "heads/nki/k", sha=commit.sha)
        ref = (await gh.rest.git.async_get_ref(*REPO, "heads/nki/k")).parsed_data
        assert ref.object_.sha == commit.sha
        listing = (await gh.rest.git.async_get_tree(*REPO, tree.sha)).parsed_data
        assert {e.path for e in listing.tree} == {"README.md", "src/a.py", "nki_kernels/k.py"}

    async def test_pull_requests(self, gh: GitHub,  # type: ignore[type-arg]
                                 github_double: GitHubDouble) -> None:
        """Create, list by head and update a PR; a second PR for the same head is refused."""
        github_double.commit("acme/kernels", {"x.py": "x"}, branch="nki/x")
        pr = (await gh.rest.pulls.async_create(*REPO, title="NKI x", head="nki/x", base="main",
                                               body="evidence")).parsed_data
        assert pr.head.ref == "nki/x" and pr.base.ref == "main"
        with pytest.raises(RequestFailed):
            await gh.rest.pulls.async_create(*REPO, title="again", head="nki/x", base="main")
        found = (await gh.rest.pulls.async_list(*REPO, head="acme:nki/x")).parsed_data
        assert [p.number for p in found] == [pr.number]
        assert (await gh.rest.pulls.async_list(*REPO, head="acme:other")).parsed_data == []
        updated = (await gh.rest.pulls.async_update(*REPO, pr.number, body="new")).parsed_data
        assert updated.body == "new"

    async def test_tarball_redirect(self, gh: GitHub,  # type: ignore[type-arg]
                                    github_double: GitHubDouble,
                                    github_settings: Settings) -> None:
        """The tarball endpoint redirects to a codeload-like .tar.gz of the commit's files."""
        sha = github_double.repo("acme/kernels").refs["heads/main"]
        resp = await gh.rest.repos.async_download_tarball_archive(*REPO, sha)
        with tarfile.open(fileobj=io.BytesIO(resp.content), mode="r:gz") as tar:
            names = sorted(tar.getnames())
        assert names == [f"acme-kernels-{sha[:7]}/README.md", f"acme-kernels-{sha[:7]}/src/a.py"]
        raw = httpx.get(f"{github_settings.github_url}/repos/acme/kernels/tarball/{sha}")
        assert raw.status_code == 401  # no token, no tarball
        assert github_double.errors == [f"GET /repos/acme/kernels/tarball/{sha}: "
                                         "no valid installation token"]
        github_double.errors.clear()

    async def test_contents_branches_and_checks(self, gh: GitHub,  # type: ignore[type-arg]
                                                github_double: GitHubDouble) -> None:
        """Contents (files and directories), branches, commits and check runs round-trip."""
        listing = (await gh.rest.repos.async_get_content(*REPO, "src")).parsed_data
        assert isinstance(listing, list) and [i.name for i in listing] == ["a.py"]
        branch = (await gh.rest.repos.async_get_branch(*REPO, "main")).parsed_data
        commit = (await gh.rest.repos.async_get_commit(*REPO, "main")).parsed_data
        assert branch.commit.sha == commit.sha
        run = (await gh.rest.checks.async_create(*REPO, name="n", head_sha=commit.sha,
                                                 status="in_progress")).parsed_data
        done = (await gh.rest.checks.async_update(
            *REPO, run.id, conclusion="success", output={
                "title": "ok", "summary": "s", "annotations": [{
                    "path": "src/a.py", "start_line": 1, "end_line": 1,
                    "annotation_level": "notice", "message": "m"}]})).parsed_data
        assert done.status == "completed" and done.conclusion == "success"
        assert len(github_double.check_runs[run.id]["annotations"]) == 1
        with pytest.raises(RequestFailed):
            await gh.rest.checks.async_create(*REPO, name="n", head_sha="f" * 40)
