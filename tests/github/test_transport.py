"""The redacting transport: per-call clients that close it never cut another call short."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from nkibot.github.client import RedactingTransport, SyncRedactingTransport


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal HTTP/1.1 server: /slow answers after 0.3 s, anything else at once."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path == b"/slow":
                await asyncio.sleep(0.3)
            body = b"done " + path
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def url() -> AsyncIterator[str]:
    handlers: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        await _answer(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"
    for task in handlers:  # a handler still sleeping on /slow: stop it, close its socket
        task.cancel()
    await asyncio.gather(*handlers, return_exceptions=True)


async def _call(transport: RedactingTransport, url: str, path: str) -> str:
    # As githubkit does without a context: one client per call, closed when it ends.
    async with httpx.AsyncClient(transport=transport, base_url=url) as client:
        return (await client.get(path)).text


async def test_a_call_ending_does_not_close_one_in_flight(url: str) -> None:
    """Two calls share the transport; the quick one's client closes first."""
    transport = RedactingTransport()
    slow, fast = await asyncio.gather(_call(transport, url, "/slow"), _call(transport, url, "/x"))
    assert (slow, fast) == ("done /slow", "done /x")


async def test_a_cancelled_call_closes_its_connection(url: str) -> None:
    """Cancelled mid-response, the call's own transport is closed (no socket for the GC)."""
    made: list[httpx.AsyncHTTPTransport] = []

    def make() -> httpx.AsyncHTTPTransport:
        made.append(httpx.AsyncHTTPTransport())
        return made[-1]

    task = asyncio.ensure_future(_call(RedactingTransport(make), url, "/slow"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(made) == 1 and not made[0]._pool.connections


class _Quick(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"done " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_the_sync_twin_answers_and_closes() -> None:
    """The synchronous transport reads the body and closes its per-call transport."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quick)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    made: list[httpx.HTTPTransport] = []

    def make() -> httpx.HTTPTransport:
        made.append(httpx.HTTPTransport())
        return made[-1]

    try:
        with httpx.Client(transport=SyncRedactingTransport(make),
                          base_url=f"http://127.0.0.1:{server.server_port}") as client:
            assert client.get("/y").text == "done /y"
        assert len(made) == 1 and not made[0]._pool.connections
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
