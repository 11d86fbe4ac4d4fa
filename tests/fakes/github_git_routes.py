"""Contents, branches, tarballs, the Git Data API and pull requests of the GitHub double."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from githubkit_schemas.latest import models as m
from starlette.responses import RedirectResponse, Response

from tests.fakes import github_json as J
from tests.fakes.github import GitHubDouble, Req
from tests.fakes.github_routes import R, _repo, err, ok, route
from tests.fakes.github_skeleton import skeleton
from tests.fakes.github_state import Pull


@route("GET", R + r"/contents/(.*)")
def contents(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.resolve(r.query.get("ref", repo.default_branch))
    if sha is None:
        return err(404, "No commit found for the ref")
    tree = repo.trees[repo.commits[sha].tree]
    path = r.groups[2].strip("/")
    if path in tree:
        return ok(J.content_file(path, repo.blobs[tree[path]], tree[path]))
    prefix = f"{path}/" if path else ""
    names = sorted({p[len(prefix):].split("/")[0] for p in tree if p.startswith(prefix)})
    if not names:
        return err(404, "Not Found")
    items = []
    for name in names:
        full = prefix + name
        kind = "file" if full in tree else "dir"
        items.append(skeleton(m.ContentDirectoryItems, {
            "type": kind, "name": name, "path": full, "sha": tree.get(full, "0" * 40),
            "size": len(repo.blobs[tree[full]]) if kind == "file" else 0}))
    return ok(items)


@route("GET", R + r"/branches/(.+)")
def get_branch(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.refs.get(f"heads/{r.groups[2]}")
    return ok(J.branch(repo, r.groups[2], sha)) if sha else err(404, "Branch not found")


@route("GET", R + r"/commits/([^/]+)")
def get_commit(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.resolve(r.groups[2])
    return ok(J.short_commit(repo, sha)) if sha else err(422, "No commit found for SHA")


@route("GET", R + r"/tarball/(.*)")
def tarball(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.resolve(r.groups[2] or repo.default_branch)
    if sha is None:
        return err(404, "Not Found")
    return RedirectResponse(f"{d.base_url}/_codeload/{repo.full_name}/legacy.tar.gz/{sha}", 302)


@route("GET", r"/_codeload/([^/]+)/([^/]+)/legacy\.tar\.gz/([0-9a-f]{40})", auth="none")
def codeload(d: GitHubDouble, r: Req) -> Response:
    repo = d.repos.get(f"{r.groups[0]}/{r.groups[1]}")
    if repo is None or r.groups[2] not in repo.commits:
        return err(404, "Not Found")
    return Response(repo.tarball(r.groups[2]), media_type="application/x-gzip")


# --- Git Data API ---------------------------------------------------------------------
@route("POST", R + "/git/blobs")
def create_blob(d: GitHubDouble, r: Req) -> Response:
    body: dict[str, Any] = r.body or {}
    try:
        data = (base64.b64decode(body["content"], validate=True)
                if body.get("encoding") == "base64" else str(body["content"]).encode())
    except (KeyError, binascii.Error):
        return err(422, "content is required (utf-8 or valid base64)")
    sha = _repo(d, r).put_blob(data)
    blob = skeleton(m.ShortBlob, {"sha": sha, "url": f"https://github.invalid/blobs/{sha}"})
    return ok(blob, 201)


@route("GET", R + r"/git/blobs/([0-9a-f]{40})")
def get_blob(d: GitHubDouble, r: Req) -> Response:
    data = _repo(d, r).blobs.get(r.groups[2])
    if data is None:
        return err(404, "Not Found")
    return ok(skeleton(m.Blob, {"sha": r.groups[2], "size": len(data), "encoding": "base64",
                                "content": base64.b64encode(data).decode()}))


@route("POST", R + "/git/trees")
def create_tree(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    base = body.get("base_tree")
    if base is not None and base not in repo.trees:
        return err(422, "base_tree is not a tree")
    entries = dict(repo.trees[base]) if base else {}
    for item in body.get("tree", []):
        path = item.get("path", "")
        if item.get("content") is not None:
            entries[path] = repo.put_blob(str(item["content"]).encode())
        elif item.get("sha") is None:
            entries.pop(path, None)
        elif item["sha"] in repo.blobs:
            entries[path] = item["sha"]
        else:
            return err(422, f"tree.sha {item['sha']} is not a blob")
    return ok(J.git_tree(repo, repo.put_tree(entries)), 201)


@route("GET", R + r"/git/trees/([0-9a-f]{40})")
def get_tree(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = r.groups[2] if r.groups[2] in repo.trees else None
    if sha is None and r.groups[2] in repo.commits:
        sha = repo.commits[r.groups[2]].tree
    return ok(J.git_tree(repo, sha)) if sha else err(404, "Not Found")


@route("POST", R + "/git/commits")
def create_commit(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    parents = list(body.get("parents", []))
    if body.get("tree") not in repo.trees or any(p not in repo.commits for p in parents):
        return err(422, "tree or parent sha not found")
    sha = repo.put_commit(body["tree"], parents, str(body.get("message", "")))
    return ok(J.git_commit(repo, sha), 201)


@route("GET", R + r"/git/commits/([0-9a-f]{40})")
def get_git_commit(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    if r.groups[2] not in repo.commits:
        return err(404, "Not Found")
    return ok(J.git_commit(repo, r.groups[2]))


@route("GET", R + r"/git/ref/(.+)")
def get_ref(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.refs.get(r.groups[2])
    if sha is None:  # an empty repository answers 409; a missing ref 404
        return err(409 if not repo.refs else 404, "Not Found")
    return ok(J.git_ref(repo, r.groups[2], sha))


@route("POST", R + "/git/refs")
def create_ref(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    ref = str(body.get("ref", ""))
    if not ref.startswith("refs/") or ref.count("/") < 2:
        return err(422, "ref must start with refs/ and have at least two slashes")
    if ref[5:] in repo.refs:
        return err(422, "Reference already exists")
    if body.get("sha") not in repo.commits:
        return err(422, "Object does not exist")
    repo.refs[ref[5:]] = body["sha"]
    return ok(J.git_ref(repo, ref[5:], body["sha"]), 201)


@route("PATCH", R + r"/git/refs/(.+)")
def update_ref(d: GitHubDouble, r: Req) -> Response:
    repo, body, ref = _repo(d, r), r.body or {}, r.groups[2].removeprefix("refs/")
    old, new = repo.refs.get(ref), body.get("sha")
    if old is None:
        return err(422, "Reference does not exist")
    if new not in repo.commits:
        return err(422, "Object does not exist")
    if not body.get("force") and not repo.is_ancestor(old, new):
        return err(422, "Update is not a fast forward")
    repo.refs[ref] = new
    return ok(J.git_ref(repo, ref, new))


# --- pull requests ---------------------------------------------------------------------
def _pull_json(d: GitHubDouble, full_name: str, pr: Pull, simple: bool = False) -> dict[str, Any]:
    data = J.pull(d.repos[full_name], d.repos[pr.head_repo], pr)
    if simple:
        keep = set(m.PullRequestSimple.model_fields) | {
            f.alias for f in m.PullRequestSimple.model_fields.values() if f.alias}
        data = {k: v for k, v in data.items() if k in keep}
    return data


@route("GET", R + "/pulls")
def list_pulls(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    state, head = r.query.get("state", "open"), r.query.get("head")
    found = [pr for pr in repo.pulls.values()
             if state in ("all", pr.state)
             and (head is None or head == f"{d.repos[pr.head_repo].owner}:{pr.head_ref}")
             and r.query.get("base", pr.base_ref) == pr.base_ref]
    return ok([_pull_json(d, repo.full_name, pr, simple=True) for pr in found])


@route("POST", R + "/pulls")
def create_pull(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    owner, _, branch = str(body.get("head", "")).rpartition(":")
    head_repo = d.repos.get(f"{owner}/{repo.name}") if owner else repo
    if head_repo is None or f"heads/{branch}" not in head_repo.refs:
        return err(422, "Validation Failed: head does not exist")
    base = str(body.get("base", repo.default_branch))
    if any(p.head_ref == branch and p.base_ref == base and p.state == "open"
           for p in repo.pulls.values()):
        return err(422, f"A pull request already exists for {head_repo.owner}:{branch}.")
    number = max([0, *repo.issues]) + 1
    pr = Pull(number, branch, head_repo.full_name, base, str(body.get("title", "")),
              str(body.get("body") or ""), user="nkibot[bot]", draft=bool(body.get("draft")))
    repo.pulls[number] = pr
    repo.issues[number] = {"title": pr.title, "body": pr.body, "user": pr.user}
    return ok(_pull_json(d, repo.full_name, pr), 201)


@route("GET", R + r"/pulls/(\d+)")
def get_pull(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    pr = repo.pulls.get(int(r.groups[2]))
    return ok(_pull_json(d, repo.full_name, pr)) if pr else err(404, "Not Found")


@route("PATCH", R + r"/pulls/(\d+)")
def update_pull(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    pr = repo.pulls.get(int(r.groups[2]))
    if pr is None:
        return err(404, "Not Found")
    pr.title = str(body.get("title", pr.title))
    pr.body = str(body.get("body", pr.body) or "")
    pr.state = str(body.get("state", pr.state))
    pr.base_ref = str(body.get("base", pr.base_ref))
    return ok(_pull_json(d, repo.full_name, pr))
