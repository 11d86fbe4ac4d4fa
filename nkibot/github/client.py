"""The one place GitHub clients are built: App (JWT) and installation (token) auth.

`base_url` comes from settings so tests point the real githubkit client at the
GitHub double. Rate limits and 5xx answers are retried by githubkit itself. Every
request body leaves through `RedactingTransport`, the one place all published text
(check runs, comments, PR bodies, commits) passes, so no secret is ever posted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import httpx
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub
from githubkit.retry import RetryChainDecision, RetryRateLimit, RetryServerError

from nkibot.config.settings import Settings
from nkibot.redact import redact, redact_data

#: Secondary rate limits come in bursts; allow a few waits before giving up.
RETRY = RetryChainDecision(RetryRateLimit(max_retry=3), RetryServerError(max_retry=3))
TIMEOUT_S = 30.0


def redacted_request(request: httpx.Request) -> httpx.Request:
    """The same request with every string in its JSON (or text) body redacted."""
    body = request.read()
    if not body:
        return request
    kind = request.headers.get("content-type", "")
    try:
        if "json" in kind:
            new = json.dumps(redact_data(json.loads(body))).encode("utf-8")
        elif kind.startswith("text/"):
            new = redact(body.decode("utf-8")).encode("utf-8")
        else:
            return request
    except (ValueError, UnicodeDecodeError):
        return request  # not what it claims to be: send as is, GitHub will refuse it
    if new == body:
        return request
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    return httpx.Request(request.method, request.url, headers=headers, content=new,
                         extensions=request.extensions)


class _ClosingStream(httpx.AsyncByteStream):
    """A response body that closes its request's own transport once the body is closed."""

    def __init__(self, stream: httpx.AsyncByteStream, owner: httpx.AsyncBaseTransport) -> None:
        self._stream, self._owner = stream, owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            await _shielded_close(self._owner)


async def _shielded_close(transport: httpx.AsyncBaseTransport) -> None:
    # A cancelled job still closes its socket instead of leaving it to the GC.
    with anyio.CancelScope(shield=True):
        await transport.aclose()


class RedactingTransport(httpx.AsyncBaseTransport):
    """An async transport that redacts request bodies, then sends each over a transport
    of its own, closed with the response.

    githubkit builds an `httpx.AsyncClient` per call around the one transport it was
    given and closes it (and so the transport) when that call ends. A shared pool would
    then be closed under every other call still in flight on the same client (a PR
    update failed with ReadError while the cancel watcher's poll finished), so no pool is
    shared: one connection per call, as githubkit's per-call clients give anyway.
    """

    def __init__(self, make: Callable[[], httpx.AsyncBaseTransport] = httpx.AsyncHTTPTransport,
                 ) -> None:
        self.make = make

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        inner = self.make()
        try:
            response = await inner.handle_async_request(redacted_request(request))
        except BaseException:
            await _shielded_close(inner)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_ClosingStream(response.stream, inner),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        """Nothing shared to close: each call's transport closes with its response."""


class _SyncClosingStream(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, owner: httpx.BaseTransport) -> None:
        self._stream, self._owner = stream, owner

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._owner.close()


class SyncRedactingTransport(httpx.BaseTransport):
    """The synchronous twin of `RedactingTransport` (githubkit's sync calls)."""

    def __init__(self, make: Callable[[], httpx.BaseTransport] = httpx.HTTPTransport) -> None:
        self.make = make

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        inner = self.make()
        try:
            response = inner.handle_request(redacted_request(request))
        except BaseException:
            inner.close()
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_SyncClosingStream(response.stream, inner),
                              extensions=response.extensions)

    def close(self) -> None:
        """Nothing shared to close: each call's transport closes with its response."""


class GitHubAppNotConfigured(RuntimeError):
    """NKIBOT_APP_ID and a private key are needed to talk to GitHub as the App."""


def _credentials(settings: Settings) -> tuple[int, str]:
    pem = settings.private_key_pem()
    if settings.app_id is None or not pem:
        raise GitHubAppNotConfigured(
            "set NKIBOT_APP_ID and NKIBOT_PRIVATE_KEY (or NKIBOT_PRIVATE_KEY_PATH)"
        )
    return settings.app_id, pem


def app_client(settings: Settings) -> GitHub[AppAuthStrategy]:
    """Authenticated as the App itself (JWT): installations, access tokens."""
    app_id, pem = _credentials(settings)
    return GitHub(
        AppAuthStrategy(app_id, pem), base_url=settings.github_url, auto_retry=RETRY,
        timeout=TIMEOUT_S, http_cache=False, transport=SyncRedactingTransport(),
        async_transport=RedactingTransport(),
    )


def installation_client(
    settings: Settings, installation_id: int
) -> GitHub[AppInstallationAuthStrategy]:
    """Authenticated as one installation; githubkit fetches and caches its token."""
    app_id, pem = _credentials(settings)
    return GitHub(
        AppInstallationAuthStrategy(app_id, pem, installation_id),
        base_url=settings.github_url, auto_retry=RETRY, timeout=TIMEOUT_S, http_cache=False,
        transport=SyncRedactingTransport(), async_transport=RedactingTransport(),
    )
