"""A GitHub double: real HTTP on loopback, App JWT and installation tokens verified.

It keeps repositories, threads and check runs in memory, records every call, and
can fail on purpose (`fail_next`, `rate_limit_next`) to exercise githubkit's
retries. Responses parse with githubkit's own models (see tests/fakes/github_json.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import jwt
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.fakes.github_state import Ids, Pull, Repo

RATE_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class Req:
    method: str
    path: str
    groups: tuple[str, ...]
    query: dict[str, str]
    body: Any
    installation_id: int | None


@dataclass
class Fault:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"


class GitHubDouble:
    """State, seeding helpers and fault injection; `asgi` serves it (see `serve`)."""

    def __init__(self, app_id: int, public_key_pem: str) -> None:
        self.app_id = app_id
        self.public_key = public_key_pem
        self.base_url = ""
        self._lock = threading.RLock()
        # Tokens outlive reset(): githubkit caches them process-wide for their lifetime.
        self.tokens: dict[str, int] = {}
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.ids = Ids()
            self.repos: dict[str, Repo] = {}
            self.installations: dict[int, str] = {}
            self.calls: list[Call] = []
            self.errors: list[str] = []
            self.check_runs: dict[int, dict[str, Any]] = {}
            self.comments: dict[int, dict[str, Any]] = {}
            self.reactions: dict[tuple[int, str, str], int] = {}
            self.faults: list[Fault] = []
            self.holds: list[tuple[re.Pattern[str], threading.Event]] = []

    # --- seeding ------------------------------------------------------------------
    def add_installation(self, installation_id: int, owner: str) -> None:
        self.installations[installation_id] = owner

    def add_repo(self, full_name: str, files: dict[str, str | bytes] | None = None,
                 installation_id: int = 1, default_branch: str = "main",
                 private: bool = False) -> Repo:
        """A repository with one commit of `files` on `default_branch`."""
        owner = full_name.split("/")[0]
        self.installations.setdefault(installation_id, owner)
        repo = Repo(full_name, self.ids(), installation_id, default_branch, private)
        self.repos[full_name] = repo
        repo.commit_files(dict(files or {"README.md": "# test\n"}), default_branch, "initial")
        return repo

    def repo(self, full_name: str) -> Repo:
        return self.repos[full_name]

    def commit(self, full_name: str, files: dict[str, str | bytes | None],
               branch: str | None = None, message: str = "update") -> str:
        repo = self.repos[full_name]
        return repo.commit_files(files, branch or repo.default_branch, message)

    def set_permission(self, full_name: str, login: str, role: str) -> None:
        self.repos[full_name].permissions[login] = role

    def add_issue(self, full_name: str, number: int, title: str = "Convert me",
                  body: str = "", user: str = "octocat") -> None:
        self.repos[full_name].issues[number] = {"title": title, "body": body, "user": user}

    def add_pull(self, full_name: str, number: int, head_ref: str,
                 files: dict[str, str | bytes | None] | None = None, base_ref: str | None = None,
                 title: str = "A change", body: str = "", head_repo: str | None = None) -> Pull:
        """A PR whose head branch is the base plus `files` (committed on `head_repo`)."""
        repo = self.repos[full_name]
        base_ref = base_ref or repo.default_branch
        source = self.repos[head_repo or full_name]
        source.refs[f"heads/{head_ref}"] = repo.refs[f"heads/{base_ref}"]
        if source is not repo:
            source.commits.update(repo.commits)
            source.trees.update(repo.trees)
            source.blobs.update(repo.blobs)
        source.commit_files(dict(files or {}), head_ref, "pr change")
        pr = Pull(number, head_ref, source.full_name, base_ref, title, body)
        repo.pulls[number] = pr
        repo.issues[number] = {"title": title, "body": body, "user": "octocat"}
        return pr

    def files_at(self, full_name: str, ref: str) -> dict[str, bytes]:
        return self.repos[full_name].files_at(ref)

    # --- faults ---------------------------------------------------------------------
    def fail_next(self, n: int = 1, status: int = 502) -> None:
        self.faults.extend(Fault(status) for _ in range(n))

    def rate_limit_next(self, n: int = 1, retry_after: int = 1) -> None:
        """Secondary rate limit: 403 with `retry-after` and GitHub's documented message."""
        self.faults.extend(
            Fault(403, {"retry-after": str(retry_after)}, RATE_LIMIT_MESSAGE) for _ in range(n))

    def hold(self, pattern: str) -> threading.Event:
        """Requests whose path matches wait (up to 20 s) until the returned event is set."""
        gate = threading.Event()
        self.holds.append((re.compile(pattern), gate))
        return gate

    async def _wait_for_holds(self, path: str) -> None:
        deadline = time.monotonic() + 20
        for rx, gate in list(self.holds):
            while rx.search(path) and not gate.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    # --- inspection -----------------------------------------------------------------
    def calls_to(self, method: str, pattern: str) -> list[Call]:
        rx = re.compile(pattern)
        return [c for c in self.calls if c.method == method and rx.search(c.path)]

    def check_runs_of(self, full_name: str) -> list[dict[str, Any]]:
        return [r for r in self.check_runs.values() if r["repo"] == full_name]

    def comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments.values()
                if c["repo"] == full_name and c["issue"] == number]

    # --- auth -----------------------------------------------------------------------
    def verify_jwt(self, header: str) -> str | None:
        """None when the App JWT is valid, else why not."""
        if not header.startswith("Bearer "):
            return "App endpoints need `Authorization: Bearer <JWT>`"
        try:
            claims = jwt.decode(header[7:], self.public_key, algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"]}, leeway=30)
        except jwt.PyJWTError as exc:
            return f"bad JWT: {exc}"
        if str(claims["iss"]) != str(self.app_id):
            return f"JWT iss {claims['iss']!r} is not app {self.app_id}"
        if claims["exp"] - claims["iat"] > 660 or claims["iat"] > time.time() + 60:
            return "JWT iat/exp window is not GitHub's (at most 10 minutes, not in the future)"
        return None

    def issue_token(self, installation_id: int) -> str:
        token = "ghs_" + secrets.token_hex(18)
        self.tokens[token] = installation_id
        return token

    def token_installation(self, header: str) -> int | None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return None
        return self.tokens.get(token)

    async def asgi(self, scope: Any, receive: Any, send: Any) -> None:
        from tests.fakes.github_routes import handle

        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        query = {k: v[-1] for k, v in parse_qs(request.url.query).items()}
        call = Call(request.method, request.url.path, query, body)
        await self._wait_for_holds(request.url.path)
        with self._lock:
            self.calls.append(call)
            response = self._fault() or handle(self, request.method, request.url.path, query,
                                               body, request.headers.get("authorization", ""))
        call.status = response.status_code
        await response(scope, receive, send)

    def _fault(self) -> Response | None:
        if not self.faults:
            return None
        fault = self.faults.pop(0)
        return JSONResponse({"message": fault.message, "documentation_url": "https://docs.github.com"},
                            status_code=fault.status, headers=fault.headers)
