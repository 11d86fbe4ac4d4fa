"""The dispatcher's GitHub edge: a handful of typed githubkit REST calls, nothing else."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from githubkit import GitHub
from githubkit.exception import RequestFailed

from nkibot.config.settings import PERMISSION_ORDER

MAX_COMMENT_PAGES = 10


@dataclass(frozen=True)
class PullHead:
    sha: str
    ref: str
    repo: str | None
    base_ref: str


def _split(repo: str) -> tuple[str, str]:
    owner, _, name = repo.partition("/")
    return owner, name


def _is_404(exc: RequestFailed) -> bool:
    return exc.response.status_code == 404


class GitHubGateway:
    """What the dispatcher reads and writes on GitHub, for one installation."""

    def __init__(self, gh: GitHub[Any]) -> None:
        self.gh = gh

    async def permission(self, repo: str, login: str) -> str | None:
        """The collaborator's role (read..admin), or None for a non-collaborator."""
        owner, name = _split(repo)
        try:
            resp = await self.gh.rest.repos.async_get_collaborator_permission_level(
                owner, name, login)
        except RequestFailed as exc:
            if _is_404(exc):
                return None
            raise
        data = resp.parsed_data
        role = data.role_name if isinstance(data.role_name, str) else None
        return role if role in PERMISSION_ORDER else data.permission

    async def read_file(self, owner: str, repo: str, path: str) -> str | None:
        try:
            resp = await self.gh.rest.repos.async_get_content(owner, repo, path)
        except RequestFailed as exc:
            if _is_404(exc):
                return None
            raise
        content = getattr(resp.parsed_data, "content", None)
        if not isinstance(content, str):
            return None  # a directory, symlink or submodule is not a config file
        return base64.b64decode(content).decode("utf-8", errors="replace")

    async def default_branch_head(self, repo: str) -> tuple[str, str | None]:
        """(default branch, its head SHA; None for an empty repository)."""
        owner, name = _split(repo)
        branch = (await self.gh.rest.repos.async_get(owner, name)).parsed_data.default_branch
        try:
            ref = await self.gh.rest.git.async_get_ref(owner, name, f"heads/{branch}")
        except RequestFailed as exc:
            if _is_404(exc) or exc.response.status_code == 409:
                return branch, None
            raise
        return branch, ref.parsed_data.object_.sha

    async def pull_head(self, repo: str, number: int) -> PullHead:
        owner, name = _split(repo)
        pr = (await self.gh.rest.pulls.async_get(owner, name, number)).parsed_data
        head_repo = pr.head.repo.full_name if pr.head.repo is not None else None
        return PullHead(pr.head.sha, pr.head.ref, head_repo, pr.base.ref)

    async def react_eyes(self, repo: str, comment_id: int) -> None:
        owner, name = _split(repo)
        # GitHub answers 200 with the existing reaction on a repeat: idempotent by design.
        await self.gh.rest.reactions.async_create_for_issue_comment(
            owner, name, comment_id, content="eyes")

    async def find_check_run(self, repo: str, sha: str, name: str, external_id: str) -> int | None:
        owner, rname = _split(repo)
        resp = await self.gh.rest.checks.async_list_for_ref(
            owner, rname, sha, check_name=name, filter_="all", per_page=100)
        for run in resp.parsed_data.check_runs:
            if run.external_id == external_id:
                return run.id
        return None

    async def create_check_run(self, repo: str, sha: str, name: str, external_id: str,
                               summary: str) -> int:
        owner, rname = _split(repo)
        resp = await self.gh.rest.checks.async_create(
            owner, rname, name=name, head_sha=sha, status="queued", external_id=external_id,
            output={"title": "Queued", "summary": summary})
        return resp.parsed_data.id

    async def cancel_check_run(self, repo: str, check_run_id: int, summary: str) -> None:
        owner, rname = _split(repo)
        await self.gh.rest.checks.async_update(
            owner, rname, check_run_id, status="completed", conclusion="cancelled",
            output={"title": "Cancelled", "summary": summary})

    async def has_comment_with(self, repo: str, issue: int, marker: str) -> bool:
        owner, name = _split(repo)
        for page in range(1, MAX_COMMENT_PAGES + 1):
            resp = await self.gh.rest.issues.async_list_comments(
                owner, name, issue, per_page=100, page=page)
            comments: list[Any] = list(resp.parsed_data)
            if any(marker in (c.body or "") for c in comments):
                return True
            if len(comments) < 100:
                return False
        return False

    async def comment(self, repo: str, issue: int, body: str) -> None:
        owner, name = _split(repo)
        await self.gh.rest.issues.async_create_comment(owner, name, issue, body=body)

    # --- issues (the conversion dashboard) -------------------------------------------
    async def issue_body(self, repo: str, number: int) -> str:
        owner, name = _split(repo)
        issue = (await self.gh.rest.issues.async_get(owner, name, number)).parsed_data
        return issue.body or ""

    async def set_issue_body(self, repo: str, number: int, body: str) -> None:
        owner, name = _split(repo)
        await self.gh.rest.issues.async_update(owner, name, number, body=body)

    async def create_issue(self, repo: str, title: str, body: str) -> tuple[int, str]:
        """(number, GraphQL node id) of the new issue."""
        owner, name = _split(repo)
        issue = (await self.gh.rest.issues.async_create(
            owner, name, title=title, body=body)).parsed_data
        return issue.number, issue.node_id

    async def find_open_issue(self, repo: str, marker: str) -> tuple[int, str] | None:
        """(number, body) of the oldest open issue (not PR) whose body holds `marker`."""
        owner, name = _split(repo)
        found: list[tuple[int, str]] = []
        for page in range(1, MAX_COMMENT_PAGES + 1):
            resp = await self.gh.rest.issues.async_list_for_repo(
                owner, name, state="open", per_page=100, page=page)
            issues: list[Any] = list(resp.parsed_data)
            found += [(i.number, i.body or "") for i in issues
                      if marker in (i.body or "") and not i.pull_request]
            if len(issues) < 100:
                break
        return min(found) if found else None

    async def pin_issue(self, node_id: str) -> None:
        """Pin an issue to the repository (GraphQL only; there is no REST endpoint)."""
        await self.gh.async_graphql(
            "mutation($id: ID!) { pinIssue(input: {issueId: $id}) { issue { number } } }",
            {"id": node_id})

    async def files_at(self, repo: str, sha: str, wanted: Callable[[str, int], bool],
                       max_files: int) -> dict[str, str]:
        """Texts of the files at commit `sha` that `wanted(path, size)` selects (Git Data API)."""
        owner, name = _split(repo)
        tree = (await self.gh.rest.git.async_get_tree(owner, name, sha, recursive="1")
                ).parsed_data
        files: dict[str, str] = {}
        for entry in tree.tree:
            if entry.type != "blob" or not entry.path or not entry.sha:
                continue
            if not wanted(entry.path, int(entry.size or 0)) or len(files) >= max_files:
                continue
            blob = (await self.gh.rest.git.async_get_blob(owner, name, entry.sha)).parsed_data
            data = base64.b64decode(blob.content) if blob.encoding == "base64" else (
                blob.content.encode())
            files[entry.path] = data.decode("utf-8", errors="replace")
        return files
