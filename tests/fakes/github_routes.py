"""The REST endpoints of the GitHub double (everything nkibot's bot and runner call)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from githubkit_schemas.latest import models as m
from starlette.responses import JSONResponse, Response

from tests.fakes import github_json as J
from tests.fakes.github import GitHubDouble, Req
from tests.fakes.github_skeleton import NOW, skeleton
from tests.fakes.github_state import Repo

BOT = "nkibot[bot]"
Handler = Callable[[GitHubDouble, Req], Response]
ROUTES: list[tuple[str, re.Pattern[str], str, Handler]] = []


def route(method: str, pattern: str, auth: str = "installation") -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        ROUTES.append((method, re.compile(f"^{pattern}$"), auth, fn))
        return fn
    return register


def ok(data: Any, status: int = 200) -> Response:
    return JSONResponse(data, status_code=status)


def err(status: int, message: str) -> Response:
    return JSONResponse({"message": message, "documentation_url": "https://docs.github.com/rest",
                         "status": str(status)}, status_code=status)


def handle(d: GitHubDouble, method: str, path: str, query: dict[str, str], body: Any,
           auth: str) -> Response:
    for rmethod, rx, kind, fn in ROUTES:
        match = rx.match(path)
        if rmethod != method or not match:
            continue
        installation = None
        if kind == "app" and (why := d.verify_jwt(auth)) is not None:
            d.errors.append(f"{method} {path}: {why}")
            return err(401, "A JSON web token could not be decoded")
        if kind == "installation":
            installation = d.token_installation(auth)
            if installation is None:
                d.errors.append(f"{method} {path}: no valid installation token")
                return err(401, "Bad credentials")
        req = Req(method, path, match.groups(), query, body, installation)
        if kind == "installation" and path.startswith("/repos/"):
            repo = d.repos.get(f"{req.groups[0]}/{req.groups[1]}")
            if repo is None or repo.installation_id != installation:
                return err(404, "Not Found")
        return fn(d, req)
    return err(404, "Not Found")


def _repo(d: GitHubDouble, r: Req) -> Repo:
    return d.repos[f"{r.groups[0]}/{r.groups[1]}"]


R = r"/repos/([^/]+)/([^/]+)"


# --- App ----------------------------------------------------------------------------
@route("GET", "/app", auth="app")
def get_app(d: GitHubDouble, r: Req) -> Response:
    return ok(J.app_json(d.app_id))


@route("POST", r"/app/installations/(\d+)/access_tokens", auth="app")
def access_token(d: GitHubDouble, r: Req) -> Response:
    inst = int(r.groups[0])
    if inst not in d.installations:
        return err(404, "Not Found")
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ok(skeleton(m.InstallationToken, {
        "token": d.issue_token(inst), "expires_at": expires, "repository_selection": "all",
        "permissions": {"checks": "write", "contents": "write", "issues": "write",
                        "pull_requests": "write", "metadata": "read"},
    }), 201)


@route("GET", R + "/installation", auth="app")
def repo_installation(d: GitHubDouble, r: Req) -> Response:
    repo = d.repos.get(f"{r.groups[0]}/{r.groups[1]}")
    if repo is None:
        return err(404, "Not Found")
    return ok(skeleton(m.Installation, {"id": repo.installation_id, "app_id": d.app_id,
                                        "account": J.user(repo.owner, kind="Organization")}))


# --- repository, people, threads ---------------------------------------------------
@route("GET", R)
def get_repo(d: GitHubDouble, r: Req) -> Response:
    return ok(J.repository(_repo(d, r), full=True))


@route("GET", R + r"/collaborators/([^/]+)/permission")
def permission(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    role = repo.permissions.get(r.groups[2])
    if role is None:  # like a public repository: everyone can read
        role = "none" if repo.private else "read"
    legacy = {"maintain": "write", "triage": "read"}.get(role, role)
    return ok(skeleton(m.RepositoryCollaboratorPermission, {
        "permission": legacy, "role_name": role,
        "user": {**J.user(r.groups[2]), "role_name": role}}))


@route("GET", R + r"/issues/(\d+)")
def get_issue(d: GitHubDouble, r: Req) -> Response:
    repo, number = _repo(d, r), int(r.groups[2])
    if number not in repo.issues:
        return err(404, "Not Found")
    return ok(J.issue(repo, number, repo.issues[number]))


@route("GET", R + r"/issues/(\d+)/comments")
def list_comments(d: GitHubDouble, r: Req) -> Response:
    repo, number = _repo(d, r), int(r.groups[2])
    per_page, page = int(r.query.get("per_page", 30)), int(r.query.get("page", 1))
    found = [c for c in d.comments.values() if c["repo"] == repo.full_name and c["issue"] == number]
    chunk = found[(page - 1) * per_page: page * per_page]
    return ok([J.comment(c["id"], repo, number, c["body"], c["user"]) for c in chunk])


@route("POST", R + r"/issues/(\d+)/comments")
def create_comment(d: GitHubDouble, r: Req) -> Response:
    repo, number = _repo(d, r), int(r.groups[2])
    if number not in repo.issues:
        return err(404, "Not Found")
    if not isinstance(r.body, dict) or not isinstance(r.body.get("body"), str):
        return err(422, "body is required")
    cid = d.ids()
    d.comments[cid] = {"id": cid, "repo": repo.full_name, "issue": number,
                       "body": r.body["body"], "user": BOT}
    return ok(J.comment(cid, repo, number, r.body["body"], BOT), 201)


@route("PATCH", R + r"/issues/comments/(\d+)")
def update_comment(d: GitHubDouble, r: Req) -> Response:
    c = d.comments.get(int(r.groups[2]))
    if c is None or c["repo"] != _repo(d, r).full_name:
        return err(404, "Not Found")
    c["body"] = r.body["body"]
    return ok(J.comment(c["id"], _repo(d, r), c["issue"], c["body"], c["user"]))


@route("POST", R + r"/issues/comments/(\d+)/reactions")
def react(d: GitHubDouble, r: Req) -> Response:
    key = (int(r.groups[2]), BOT, str(r.body.get("content")))
    status = 200 if key in d.reactions else 201
    rid = d.reactions.setdefault(key, d.ids())
    return ok(skeleton(m.Reaction, {"id": rid, "content": key[2], "user": J.user(BOT),
                                    "created_at": NOW}), status)


# --- check runs ----------------------------------------------------------------------
def _run_json(d: GitHubDouble, run_id: int) -> dict[str, Any]:
    return J.check_run(J.app_json(d.app_id), run_id, d.check_runs[run_id])


@route("POST", R + "/check-runs")
def create_check_run(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), dict(r.body or {})
    if not body.get("name") or repo.resolve(str(body.get("head_sha"))) is None:
        return err(422, "No commit found for SHA: " + str(body.get("head_sha")))
    run_id = d.ids()
    body["annotations"] = list((body.get("output") or {}).get("annotations", []))
    d.check_runs[run_id] = {**body, "repo": repo.full_name, "id": run_id,
                            "updates": [dict(r.body)]}
    return ok(_run_json(d, run_id), 201)


@route("PATCH", R + r"/check-runs/(\d+)")
def update_check_run(d: GitHubDouble, r: Req) -> Response:
    run = d.check_runs.get(int(r.groups[2]))
    if run is None or run["repo"] != _repo(d, r).full_name:
        return err(404, "Not Found")
    body = dict(r.body or {})
    run["updates"].append(dict(body))
    run["annotations"].extend((body.get("output") or {}).get("annotations", []))
    if "conclusion" in body and "status" not in body:
        body["status"] = "completed"
    run.update({k: v for k, v in body.items() if k != "annotations"})
    return ok(_run_json(d, run["id"]))


@route("GET", R + r"/check-runs/(\d+)")
def get_check_run(d: GitHubDouble, r: Req) -> Response:
    run = d.check_runs.get(int(r.groups[2]))
    if run is None or run["repo"] != _repo(d, r).full_name:
        return err(404, "Not Found")
    return ok(_run_json(d, run["id"]))


@route("GET", R + r"/commits/(.+)/check-runs")
def list_check_runs(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    sha = repo.resolve(r.groups[2])
    runs = [i for i, run in d.check_runs.items()
            if run["repo"] == repo.full_name and run["head_sha"] == sha
            and r.query.get("check_name", run["name"]) == run["name"]]
    return ok({"total_count": len(runs), "check_runs": [_run_json(d, i) for i in runs]})


# The git, contents and pulls routes register themselves on import.
from tests.fakes import github_git_routes as _git_routes  # noqa: E402, F401
from tests.fakes import github_issue_routes as _issue_routes  # noqa: E402, F401
