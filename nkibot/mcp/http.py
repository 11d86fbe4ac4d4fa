"""`nkibot mcp --http`: who may reach the tools over the network.

Every bind checks Host and Origin against an allow-list (the SDK's DNS-rebinding
protection, always on): the loopback names at the port, the bind address when it is a
name or a specific address, and any `--allow-host`. A bind other than loopback also needs
a bearer token on every request: read from `--token-file`, or generated at start-up and
printed once on stderr. Start-up says on stderr what is exposed, where, and how it is
guarded. The tools run user code (sandboxed) and write files in the workspace, so
`0.0.0.0` without a token would hand both to anyone who can reach the port.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def security(host: str, port: int, allow: tuple[str, ...] = ()) -> TransportSecuritySettings:
    """Host and Origin allow-lists for a bind (see the module docstring)."""
    names = [*LOOPBACK_NAMES, *allow]
    if host not in ("0.0.0.0", "::", "") and not is_loopback(host):  # noqa: S104
        names.append(host)
    hosts = [f"{n}:{port}" for n in dict.fromkeys(names)]
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=hosts, allowed_origins=origins)


def load_token(path: Path | None) -> tuple[str, str]:
    """(token, where it came from): the file's first line, or a fresh random one."""
    if path is None:
        return secrets.token_urlsafe(32), "generated"
    lines = path.read_text(encoding="utf-8").strip().splitlines()
    token = lines[0].strip() if lines else ""
    if len(token) < 16:
        raise ValueError(f"{path} holds no token of at least 16 characters")
    return token, f"read from {path}"


@dataclass
class BearerGuard:
    """ASGI middleware: HTTP requests without `Authorization: Bearer <token>` get 401."""

    app: App
    token: str

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http" and not self._authorised(scope):
            body = json.dumps({"error": "unauthorized", "detail": (
                "this nkibot mcp server needs Authorization: Bearer <token>")}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="nkibot-mcp"')]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorised(self, scope: Scope) -> bool:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, value = given.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), self.token)


def banner(host: str, port: int, guard: TransportSecuritySettings, token_from: str | None
           ) -> str:
    """The start-up lines: what is exposed, where, and how it is guarded."""
    reach = "this machine only (loopback)" if is_loopback(host) else (
        "every network this host is on" if host in ("0.0.0.0", "::") else f"address {host}")  # noqa: S104
    auth = (f"bearer token required ({token_from})" if token_from is not None
            else "no token (loopback only)")
    return (f"nkibot mcp: serving discover, convert, compile, verify, simulate, profile, "
            f"lookup and emit over streamable HTTP at http://{host}:{port}/mcp, reachable "
            f"from {reach}; {auth}; Host must be one of {', '.join(guard.allowed_hosts)}")
