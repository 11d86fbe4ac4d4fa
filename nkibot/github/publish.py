"""Publish a verified kernel: a commit on `nki/<slug>` (Git Data API) and one pull request.

`plan_publication` decides what to publish (pure); `publish` sends it. Human decisions win
(what users ask of Renovate and Dependabot):
- a branch with a commit nkibot did not make is left alone, whoever asked; the runner
  says so in its reply;
- a PR a human closed is never reopened by a retry; a new `/nki convert` opens a new one;
- when the base moved and the branch holds only nkibot's commits, the commit is recreated
  on the new base (the one forced update); on the same base the branch fast-forwards.
An existing open PR for the branch is updated, never duplicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from githubkit.exception import RequestFailed

from nkibot.github.artifacts import kernel_file_text, test_file_text, test_path_for
from nkibot.github.render import pr_body, title
from nkibot.jobs.model import Job, target_slug
from nkibot.results import ConversionResult

MAX_REF_ATTEMPTS = 5
#: How far back the branch's history is read to tell whether only nkibot committed there.
HISTORY_DEPTH = 20
#: The first line of every commit nkibot makes; the body names the source: "From <sha>;".
COMMIT_PREFIX = "nkibot: NKI kernel for "


class PublishError(RuntimeError):
    """The branch could not be updated (it kept moving, or GitHub refused)."""


@dataclass(frozen=True)
class PublishPlan:
    repo: str
    branch: str
    parent_sha: str
    files: dict[str, str]
    message: str
    base: str
    pr_title: str
    pr_body: str
    #: A verified kernel that misses the repo's performance requirement opens as a draft.
    draft: bool = False
    #: A retry (`/nki retry`, the Retry button): it never reopens what a human closed.
    retry: bool = False


@dataclass(frozen=True)
class Published:
    commit_sha: str
    pr_number: int
    pr_url: str
    created: bool


@dataclass(frozen=True)
class LeftAlone:
    """Nothing was published, because a human's decision stands; `reason` is for the reply."""

    reason: str


class BranchTouched(Exception):
    """Someone other than nkibot committed on the branch."""


class BranchMoved(Exception):
    """The branch moved between the check and a forced update; look again."""


def pr_base(job: Job) -> str:
    """The PR's head branch when it lives in this repo, else its base; issues: default."""
    trig = job.trigger
    if trig.is_pull_request and trig.head_ref and trig.head_repo == job.repo:
        return trig.head_ref
    if trig.is_pull_request and trig.base_ref:
        return trig.base_ref
    return job.default_branch


def output_paths(result: ConversionResult, output_dir: str) -> tuple[str, str]:
    """(kernel path, test path) under the repo's configured output directory."""
    assert result.kernel is not None
    name = PurePosixPath(result.kernel.path).name
    kernel = str(PurePosixPath(output_dir.strip("/") or ".") / name)
    return kernel, test_path_for(kernel)


def relative_to_dir(path: str, directory: str) -> str:
    """POSIX relative path from `directory` to `path` (both repo-relative)."""
    parts = PurePosixPath(directory).parts
    return str(PurePosixPath(*([".."] * len(parts)), path)) if parts else path


def plan_publication(job: Job, result: ConversionResult, *, output_dir: str,
                     reference_path: str, entry: str, kind: str = "module",
                     init_args: list[object] | None = None,
                     integrated: dict[str, str] | None = None,
                     check_run_url: str | None = None, date: str | None = None) -> PublishPlan:
    """What to commit and which PR to open for one finished job (pure)."""
    kernel_path, test_path = output_paths(result, output_dir)
    test_dir = str(PurePosixPath(test_path).parent)
    files = {
        kernel_path: kernel_file_text(result, sha=job.sha, repo=job.repo, date=date),
        test_path: test_file_text(
            result, kernel_module=PurePosixPath(kernel_path).stem, entry=entry, kind=kind,
            reference_path=relative_to_dir(reference_path, "" if test_dir == "." else test_dir),
            init_args=init_args),
    }
    files.update(integrated or {})
    trig = job.trigger
    closes = trig.issue_number if trig.issue_number and not trig.is_pull_request else None
    body = pr_body(result, target=job.target, sha=job.sha, check_run_url=check_run_url,
                   closes_issue=closes, files=sorted(files))
    return PublishPlan(
        repo=job.repo, branch=f"nki/{target_slug(job.target)}", parent_sha=job.sha,
        files=files, base=pr_base(job), pr_title=f"nkibot: {title(result)}", pr_body=body,
        draft=result.requirements is not None and not result.requirements.met,
        message=f"{COMMIT_PREFIX}{job.target}\n\nFrom {job.sha}; {title(result)}.",
        retry=job.generation > 0,
    )


def source_sha(message: str) -> str | None:
    """The SHA an nkibot commit was built from, or None for anybody else's commit."""
    if not message.startswith(COMMIT_PREFIX):
        return None
    found = message.partition("\n\nFrom ")[2].partition(";")[0]
    return found if len(found) == 40 else None


def _status(exc: RequestFailed) -> int:
    return int(exc.response.status_code)


class Publisher:
    """Sends a PublishPlan through one installation's githubkit client."""

    def __init__(self, gh: Any) -> None:
        self.gh = gh

    async def publish(self, plan: PublishPlan) -> Published | LeftAlone:
        owner, name = plan.repo.split("/", 1)
        closed = await self._closed_by_human(plan, owner, name) if plan.retry else None
        if closed is not None:
            return LeftAlone(
                f"A maintainer closed #{closed.number}, so this retry did not reopen it or "
                f"touch `{plan.branch}`. Comment `/nki convert` to open a new pull request.")
        try:
            commit = await self.commit(plan, owner, name)
        except BranchTouched as exc:
            return LeftAlone(
                f"Someone else has pushed to `{plan.branch}` ({exc}), so nkibot left the "
                "branch and its pull request alone. Delete the branch, or move your change "
                "elsewhere, and run `/nki retry` to publish again.")
        number, url, created = await self.pull_request(plan, owner, name)
        return Published(commit, number, url, created)

    async def _tree(self, plan: PublishPlan, owner: str, name: str) -> str:
        git = self.gh.rest.git
        base = (await git.async_get_commit(owner, name, plan.parent_sha)).parsed_data.tree.sha
        entries = []
        for path, text in sorted(plan.files.items()):
            blob = await git.async_create_blob(owner, name, content=text, encoding="utf-8")
            entries.append({"path": path, "mode": "100644", "type": "blob",
                            "sha": blob.parsed_data.sha})
        resp = await git.async_create_tree(owner, name, base_tree=base, tree=entries)
        return str(resp.parsed_data.sha)

    async def _head(self, owner: str, name: str, branch: str) -> str | None:
        try:
            resp = await self.gh.rest.git.async_get_ref(owner, name, f"heads/{branch}")
        except RequestFailed as exc:
            if _status(exc) in (404, 409):
                return None
            raise
        return str(resp.parsed_data.object_.sha)

    async def _base_of(self, owner: str, name: str, head: str) -> str:
        """The SHA the branch's nkibot commits stand on; BranchTouched if anyone else's."""
        git, current = self.gh.rest.git, head
        for _ in range(HISTORY_DEPTH):
            commit = (await git.async_get_commit(owner, name, current)).parsed_data
            source = source_sha(commit.message)
            parents = [p.sha for p in commit.parents]
            if source is None or not parents:
                first = (commit.message.splitlines() or [""])[0][:80]
                raise BranchTouched(f"commit {current[:12]}: {first}")
            # An nkibot commit stands on its source directly (or, from earlier versions, on
            # an earlier nkibot commit, with the source as a second parent).
            if parents[0] == source or (len(parents) > 1 and source in parents):
                return source
            current = parents[0]
        raise BranchTouched(f"more than {HISTORY_DEPTH} commits deep")

    async def commit(self, plan: PublishPlan, owner: str, name: str) -> str:
        """Commit the plan's files on the branch; rebuild on conflicts; see the module doc."""
        git = self.gh.rest.git
        tree = await self._tree(plan, owner, name)
        for _ in range(MAX_REF_ATTEMPTS):
            head = await self._head(owner, name, plan.branch)
            parents, force = [plan.parent_sha], False
            if head is not None:
                current = (await git.async_get_commit(owner, name, head)).parsed_data
                base = await self._base_of(owner, name, head)
                if current.tree.sha == tree:
                    return head  # same content already published: nothing to do
                # Same base: fast-forward. A moved base: recreate the commit on it (rebase).
                parents, force = ([head], False) if base == plan.parent_sha else (parents, True)
            made = await git.async_create_commit(owner, name, message=plan.message, tree=tree,
                                                 parents=parents)
            sha = str(made.parsed_data.sha)
            try:
                await self._move(owner, name, plan.branch, head, sha, force)
            except BranchMoved:
                continue
            except RequestFailed as exc:
                if _status(exc) == 422:  # created or moved meanwhile: look again
                    continue
                raise
            return sha
        raise PublishError(f"branch {plan.branch} kept moving; gave up after "
                           f"{MAX_REF_ATTEMPTS} attempts")

    async def _move(self, owner: str, name: str, branch: str, head: str | None, sha: str,
                    force: bool) -> None:
        git = self.gh.rest.git
        if head is None:
            await git.async_create_ref(owner, name, ref=f"refs/heads/{branch}", sha=sha)
            return
        # A forced update cannot say "only from `head`", so look once more right before it:
        # a push that landed since the check is never overwritten (a narrow race remains).
        if force and await self._head(owner, name, branch) != head:
            raise BranchMoved
        await git.async_update_ref(owner, name, f"heads/{branch}", sha=sha, force=force)

    async def _pulls(self, plan: PublishPlan, owner: str, name: str, state: str) -> list[Any]:
        resp = await self.gh.rest.pulls.async_list(owner, name, head=f"{owner}:{plan.branch}",
                                                   state=state)
        return list(resp.parsed_data)

    async def _existing(self, plan: PublishPlan, owner: str, name: str) -> Any | None:
        found = await self._pulls(plan, owner, name, "open")
        return found[0] if found else None

    async def _closed_by_human(self, plan: PublishPlan, owner: str, name: str) -> Any | None:
        """The newest closed, unmerged PR of the branch when no open one exists (nkibot
        never closes its own PRs, so a human did)."""
        pulls = await self._pulls(plan, owner, name, "all")
        if any(p.state == "open" for p in pulls):
            return None
        closed = [p for p in pulls if p.state == "closed" and p.merged_at is None]
        return max(closed, key=lambda p: p.number) if closed else None

    async def pull_request(self, plan: PublishPlan, owner: str, name: str
                           ) -> tuple[int, str, bool]:
        pulls = self.gh.rest.pulls
        found = await self._existing(plan, owner, name)
        if found is None:
            try:
                made = await pulls.async_create(owner, name, title=plan.pr_title,
                                                head=plan.branch, base=plan.base,
                                                body=plan.pr_body, draft=plan.draft)
                return made.parsed_data.number, made.parsed_data.html_url, True
            except RequestFailed as exc:
                # Another worker opened it between our list and create: update that one.
                found = await self._existing(plan, owner, name) if _status(exc) == 422 else None
                if found is None:
                    raise
        updated = await pulls.async_update(owner, name, found.number, title=plan.pr_title,
                                           body=plan.pr_body)
        return updated.parsed_data.number, updated.parsed_data.html_url, False
