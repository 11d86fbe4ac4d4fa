"""JSON bodies the GitHub double returns, shaped to parse with githubkit's response models."""

from __future__ import annotations

import base64
from typing import Any

from githubkit_schemas.latest import models as m

from tests.fakes.github_skeleton import NOW, skeleton
from tests.fakes.github_state import Pull, Repo


def user(login: str, uid: int = 1, kind: str | None = None) -> dict[str, Any]:
    kind = kind or ("Bot" if login.endswith("[bot]") else "User")
    return skeleton(m.SimpleUser, {
        "login": login, "id": uid, "type": kind, "site_admin": False,
        "html_url": f"https://github.com/{login}", "url": f"https://api.github.com/users/{login}",
    })


def repository(repo: Repo, full: bool = False) -> dict[str, Any]:
    model = m.FullRepository if full else m.Repository
    return skeleton(model, {
        "id": repo.id, "name": repo.name, "full_name": repo.full_name,
        "owner": user(repo.owner, kind="Organization"), "private": repo.private,
        "default_branch": repo.default_branch, "fork": False, "archived": False,
        "html_url": f"https://github.com/{repo.full_name}",
        "clone_url": f"https://github.com/{repo.full_name}.git",
        "visibility": "private" if repo.private else "public",
    })


def issue(repo: Repo, number: int, data: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if number in repo.pulls:
        extra["pull_request"] = skeleton(m.IssuePropPullRequest, {
            "url": f"https://api.github.com/repos/{repo.full_name}/pulls/{number}"})
    return skeleton(m.Issue, {
        "id": 10_000 + number, "number": number, "title": data.get("title", ""),
        "body": data.get("body", ""), "state": data.get("state", "open"),
        "user": user(data.get("user", "octocat")), "labels": [], "locked": False,
        "comments": 0, "created_at": NOW, "updated_at": NOW, **extra,
    })


def pull(repo: Repo, head_repo: Repo, pr: Pull) -> dict[str, Any]:
    head_sha = head_repo.resolve(pr.head_ref) or "0" * 40
    base_sha = repo.resolve(pr.base_ref) or "0" * 40
    return skeleton(m.PullRequest, {
        "id": 20_000 + pr.number, "number": pr.number, "state": pr.state,
        "title": pr.title, "body": pr.body, "user": user(pr.user), "draft": pr.draft,
        "merged": False, "locked": False,
        "html_url": f"https://github.com/{repo.full_name}/pull/{pr.number}",
        "head": {"ref": pr.head_ref, "sha": head_sha, "label": f"{head_repo.owner}:{pr.head_ref}",
                 "repo": repository(head_repo), "user": user(head_repo.owner)},
        "base": {"ref": pr.base_ref, "sha": base_sha, "label": f"{repo.owner}:{pr.base_ref}",
                 "repo": repository(repo), "user": user(repo.owner)},
    })


def comment(cid: int, repo: Repo, number: int, body: str, login: str) -> dict[str, Any]:
    return skeleton(m.IssueComment, {
        "id": cid, "body": body, "user": user(login), "created_at": NOW, "updated_at": NOW,
        "html_url": f"https://github.com/{repo.full_name}/issues/{number}#issuecomment-{cid}",
        "issue_url": f"https://api.github.com/repos/{repo.full_name}/issues/{number}",
        "author_association": "NONE",
    })


def content_file(path: str, data: bytes, sha: str) -> dict[str, Any]:
    return skeleton(m.ContentFile, {
        "type": "file", "encoding": "base64", "size": len(data), "name": path.rsplit("/", 1)[-1],
        "path": path, "sha": sha, "content": base64.b64encode(data).decode(),
    })


def git_ref(repo: Repo, ref: str, sha: str) -> dict[str, Any]:
    return skeleton(m.GitRef, {
        "ref": f"refs/{ref}", "object": {"type": "commit", "sha": sha,
                                         "url": f"https://api.github.com/repos/{repo.full_name}/git/commits/{sha}"},
    })


def git_commit(repo: Repo, sha: str) -> dict[str, Any]:
    obj = repo.commits[sha]
    person = {"name": "nkibot", "email": "nkibot@users.noreply.github.com", "date": NOW}
    return skeleton(m.GitCommit, {
        "sha": sha, "message": obj.message, "author": person, "committer": person,
        "tree": {"sha": obj.tree, "url": "https://github.invalid/tree"},
        "parents": [{"sha": p, "url": "https://github.invalid/c", "html_url": "https://github.invalid/c"}
                    for p in obj.parents],
        "verification": {"verified": False, "reason": "unsigned", "signature": None,
                         "payload": None, "verified_at": None},
    })


def git_tree(repo: Repo, sha: str) -> dict[str, Any]:
    entries = [{"path": p, "mode": "100644", "type": "blob", "sha": b,
                "size": len(repo.blobs[b]), "url": "https://github.invalid/blob"}
               for p, b in sorted(repo.trees[sha].items())]
    return skeleton(m.GitTree, {"sha": sha, "tree": entries, "truncated": False})


def short_commit(repo: Repo, sha: str) -> dict[str, Any]:
    """The `commit` object of branches and the commits API."""
    person = {"name": "nkibot", "email": "nkibot@users.noreply.github.com", "date": NOW}
    obj = repo.commits[sha]
    return skeleton(m.Commit, {
        "sha": sha, "commit": {"message": obj.message, "author": person, "committer": person,
                               "tree": {"sha": obj.tree, "url": "https://github.invalid/t"},
                               "comment_count": 0, "url": "https://github.invalid/c"},
        "parents": [{"sha": p, "url": "https://github.invalid/c"} for p in obj.parents],
    })


def branch(repo: Repo, name: str, sha: str) -> dict[str, Any]:
    return skeleton(m.BranchWithProtection, {
        "name": name, "commit": short_commit(repo, sha), "protected": False,
    })


def check_run(app: dict[str, Any], run_id: int, fields: dict[str, Any]) -> dict[str, Any]:
    output = fields.get("output") or {}
    return skeleton(m.CheckRun, {
        "id": run_id, "name": fields["name"], "head_sha": fields["head_sha"],
        "status": fields.get("status", "queued"), "conclusion": fields.get("conclusion"),
        "external_id": fields.get("external_id"), "details_url": fields.get("details_url"),
        "started_at": fields.get("started_at"), "completed_at": fields.get("completed_at"),
        "html_url": f"https://github.com/checks/{run_id}", "app": app,
        "output": {"title": output.get("title"), "summary": output.get("summary"),
                   "text": output.get("text"),
                   "annotations_count": len(fields.get("annotations", [])),
                   "annotations_url": "https://github.invalid/annotations"},
        "pull_requests": [],
    })


def app_json(app_id: int) -> dict[str, Any]:
    return skeleton(m.Integration, {"id": app_id, "slug": "nkibot", "name": "nkibot",
                                    "owner": user("nkibot-org", kind="Organization")})
