"""Publish a verified kernel: a commit on `nki/<slug>` (Git Data API) and one pull request.

`plan_publication` decides what to publish (pure); `publish` sends it. The ref is
never forced: when the branch moved under us, the commit is rebuilt on the new head
and tried again, a bounded number of times. An existing open PR for the branch is
updated, never duplicated.
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
#: How far back a retry looks for the job's SHA before merging it in as a second parent.
HISTORY_DEPTH = 20


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


@dataclass(frozen=True)
class Published:
    commit_sha: str
    pr_number: int
    pr_url: str
    created: bool


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
        message=f"nkibot: NKI kernel for {job.target}\n\nFrom {job.sha}; {title(result)}.",
    )


def _status(exc: RequestFailed) -> int:
    return int(exc.response.status_code)


class Publisher:
    """Sends a PublishPlan through one installation's githubkit client."""

    def __init__(self, gh: Any) -> None:
        self.gh = gh

    async def publish(self, plan: PublishPlan) -> Published:
        owner, name = plan.repo.split("/", 1)
        commit = await self.commit(plan, owner, name)
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

    async def _reaches(self, owner: str, name: str, head: str, sha: str) -> bool:
        """Whether `sha` is already in the branch's recent history (first parents)."""
        git, current = self.gh.rest.git, head
        for _ in range(HISTORY_DEPTH):
            if current == sha:
                return True
            commit = (await git.async_get_commit(owner, name, current)).parsed_data
            parents = [p.sha for p in commit.parents]
            # Our own commits name their source SHA, so one read usually answers.
            if sha in parents or f"From {sha};" in commit.message:
                return True
            if not parents:
                return False
            current = parents[0]
        return False

    async def commit(self, plan: PublishPlan, owner: str, name: str) -> str:
        """Commit the plan's files on the branch, without force; rebuild on conflicts."""
        git = self.gh.rest.git
        tree = await self._tree(plan, owner, name)
        for _ in range(MAX_REF_ATTEMPTS):
            head = await self._head(owner, name, plan.branch)
            parents = [plan.parent_sha]
            if head is not None:
                current = (await git.async_get_commit(owner, name, head)).parsed_data
                if current.tree.sha == tree:
                    return head  # same content already published: nothing to do
                merged = await self._reaches(owner, name, head, plan.parent_sha)
                parents = [head] if merged else [head, plan.parent_sha]
            made = await git.async_create_commit(owner, name, message=plan.message, tree=tree,
                                                 parents=parents)
            sha = str(made.parsed_data.sha)
            try:
                if head is None:
                    await git.async_create_ref(owner, name, ref=f"refs/heads/{plan.branch}",
                                               sha=sha)
                else:
                    await git.async_update_ref(owner, name, f"heads/{plan.branch}", sha=sha,
                                               force=False)
            except RequestFailed as exc:
                if _status(exc) == 422:  # created or moved meanwhile: rebuild on the new head
                    continue
                raise
            return sha
        raise PublishError(f"branch {plan.branch} kept moving; gave up after "
                           f"{MAX_REF_ATTEMPTS} attempts")

    async def _existing(self, plan: PublishPlan, owner: str, name: str) -> Any | None:
        resp = await self.gh.rest.pulls.async_list(owner, name, head=f"{owner}:{plan.branch}",
                                                   state="open")
        return resp.parsed_data[0] if resp.parsed_data else None

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
