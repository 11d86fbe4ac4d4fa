"""The webhook service: verify, persist to the inbox, answer. No GitHub API call on this path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from nkibot.bot.delivery import STORED_EVENTS, Delivery, Refusal, check
from nkibot.bot.group_commit import GroupCommit
from nkibot.bot.metrics import Metrics
from nkibot.bot.readiness import GitHubCheck, readiness
from nkibot.config.settings import Settings
from nkibot.jobs.factory import open_job_state, open_named_queue
from nkibot.jobs.queue import BatchPut, Closeable, Queue
from nkibot.jobs.sqs import MessageTooLarge

log = structlog.get_logger("nkibot.app")


#: Bigger bodies are verified and parsed in a thread so the event loop keeps acking others.
INLINE_CHECK_BYTES = 256 * 1024
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


class BodyTooLarge(Exception):
    pass


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, refused (BodyTooLarge) as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"detail": reason}, status_code=status)


class Inbox:
    """The ack path's writer: group commit where the queue batches (SQLite), else one put."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.group = GroupCommit(queue) if isinstance(queue, BatchPut) else None

    async def put(self, body: bytes, dedupe_key: str) -> bool:
        if self.group is not None:
            return await self.group.put(body, dedupe_key)
        return await run_in_threadpool(self.queue.put, body, dedupe_key)

    async def close(self) -> None:
        if self.group is not None:
            await self.group.close()


def _lifespan(settings: Settings, queue: Queue, metrics: Metrics, inbox: Inbox,
              owned: bool) -> Lifespan:
    """Run the dispatcher beside the service when settings enable it; stop it on shutdown.

    `owned`: the app opened `queue` itself, so it closes it (and its checkpoint thread).
    """

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = None
        if settings.dispatcher_enabled:
            from nkibot.bot.dispatcher import Dispatcher

            dispatcher = Dispatcher(settings, queue, open_named_queue("jobs", settings),
                                    open_job_state(settings), metrics)
            task = asyncio.create_task(dispatcher.run(stop))
        yield
        stop.set()
        if task is not None:
            await task
        await inbox.close()
        if owned and isinstance(queue, Closeable):
            queue.close()

    return lifespan


def _our_failure(exc: Exception) -> JSONResponse:
    # Input is fully validated before anything can raise; what lands here is ours
    # (the queue unreachable, a full disk), and GitHub should redeliver later.
    log.error("request failed", error=type(exc).__name__, detail=str(exc)[:500])
    return _answer(503, "temporarily unavailable; retry later")


async def _store(inbox: Inbox, delivery: Delivery, metrics: Metrics) -> Response:
    try:
        stored = await inbox.put(delivery.encode(), delivery.delivery_id)
    except MessageTooLarge:
        metrics.deliveries.labels(delivery.event, "too_large").inc()
        return _answer(413, "body is too large for the SQS inbox")
    except Exception as exc:
        return _our_failure(exc)
    metrics.deliveries.labels(delivery.event, "stored" if stored else "duplicate").inc()
    # The delivery id in the answer shows in GitHub's delivery log (and lets a load test
    # match answers to deliveries). Formatted by hand: this is the hot path, and `check`
    # admits only [A-Za-z0-9-_.:] in a delivery id, so nothing needs escaping.
    detail = "stored" if stored else "already stored"
    return Response(f'{{"detail":"{detail}","delivery":"{delivery.delivery_id}"}}',
                    status_code=202, media_type="application/json")


def _add_probes(app: FastAPI, settings: Settings, queue: Queue, metrics: Metrics) -> None:
    github = GitHubCheck(settings)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness only: the process answers. Readiness is /readyz."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        try:
            status, body = await readiness(settings, queue, github)
        except Exception as exc:
            return _answer(503, f"queue unreachable: {type(exc).__name__}")
        return JSONResponse(body, status_code=status)

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        data = await run_in_threadpool(generate_latest, metrics.registry)
        return PlainTextResponse(data, media_type=CONTENT_TYPE_LATEST)


def create_app(settings: Settings, inbox: Queue | None = None) -> FastAPI:
    """The FastAPI app; the dispatcher runs in its lifespan when settings enable it."""
    queue = inbox or open_named_queue("inbox", settings)
    metrics = Metrics()
    metrics.watch_depth(queue.depth)
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
    writer = Inbox(queue)
    lifespan = _lifespan(settings, queue, metrics, writer, owned=inbox is None)
    app = FastAPI(title="nkibot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.metrics = metrics
    app.state.inbox = queue
    app.add_exception_handler(Exception, lambda _request, exc: _our_failure(exc))
    _add_probes(app, settings, queue, metrics)

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        try:
            body = await read_limited(request, settings.max_body_bytes)
        except BodyTooLarge:
            metrics.deliveries.labels("unknown", "too_large").inc()
            return _answer(413, f"body is over {settings.max_body_bytes} bytes")
        if secret is None:
            return _answer(503, "NKIBOT_WEBHOOK_SECRET is not configured")
        delivery = (check(request.headers, body, secret) if len(body) < INLINE_CHECK_BYTES
                    else await run_in_threadpool(check, request.headers, body, secret))
        if isinstance(delivery, Refusal):
            metrics.deliveries.labels("unknown", f"refused_{delivery.status}").inc()
            return _answer(delivery.status, delivery.reason)
        if delivery.event == "ping":
            metrics.deliveries.labels("ping", "pong").inc()
            return JSONResponse({"detail": "pong"}, status_code=200)
        if delivery.event not in STORED_EVENTS:
            metrics.deliveries.labels("other", "ignored").inc()
            return _answer(202, f"event {delivery.event} is not handled")
        return await _store(writer, delivery, metrics)

    return app
