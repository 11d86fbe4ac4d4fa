"""Issues of the GitHub double: list, create, edit, and GraphQL's pinIssue (the dashboard)."""

from __future__ import annotations

import re
from typing import Any

from starlette.responses import Response

from tests.fakes import github_json as J
from tests.fakes.github import GitHubDouble, Req
from tests.fakes.github_routes import BOT, R, _repo, err, ok, route
from tests.fakes.github_state import Repo


def issue_json(repo: Repo, number: int) -> dict[str, Any]:
    data = J.issue(repo, number, repo.issues[number])
    data["node_id"] = f"I_{repo.id}_{number}"
    return data


@route("GET", R + "/issues")
def list_issues(d: GitHubDouble, r: Req) -> Response:
    repo = _repo(d, r)
    state = r.query.get("state", "open")
    per_page, page = int(r.query.get("per_page", 30)), int(r.query.get("page", 1))
    numbers = [n for n, i in sorted(repo.issues.items())
               if state in ("all", i.get("state", "open"))]
    chunk = numbers[(page - 1) * per_page: page * per_page]
    return ok([issue_json(repo, n) for n in chunk])


@route("POST", R + "/issues")
def create_issue(d: GitHubDouble, r: Req) -> Response:
    repo, body = _repo(d, r), r.body or {}
    if not isinstance(body, dict) or not body.get("title"):
        return err(422, "title is required")
    number = max([0, *repo.issues]) + 1
    repo.issues[number] = {"title": str(body["title"]), "body": str(body.get("body") or ""),
                           "user": BOT, "edits": 0}
    return ok(issue_json(repo, number), 201)


@route("PATCH", R + r"/issues/(\d+)")
def update_issue(d: GitHubDouble, r: Req) -> Response:
    repo, number, body = _repo(d, r), int(r.groups[2]), r.body or {}
    if number not in repo.issues:
        return err(404, "Not Found")
    issue = repo.issues[number]
    for key in ("title", "body", "state"):
        if key in body:
            issue[key] = str(body[key] or "")
    issue["edits"] = int(issue.get("edits", 0)) + 1
    return ok(issue_json(repo, number))


_PIN = re.compile(r"^I_(\d+)_(\d+)$")


@route("POST", "/graphql")
def graphql(d: GitHubDouble, r: Req) -> Response:
    body = r.body or {}
    query, variables = str(body.get("query", "")), dict(body.get("variables") or {})
    match = _PIN.match(str(variables.get("id", "")))
    if "pinIssue" not in query or match is None:
        d.errors.append(f"graphql: unsupported query {query[:80]!r}")
        return ok({"errors": [{"message": "unsupported by the double"}]})
    repo = next((x for x in d.repos.values() if x.id == int(match.group(1))), None)
    if repo is None or repo.installation_id != r.installation_id:
        return ok({"data": None, "errors": [{"type": "NOT_FOUND", "message": "no issue"}]})
    number = int(match.group(2))
    repo.issues[number]["pinned"] = True
    return ok({"data": {"pinIssue": {"issue": {"number": number}}}})
