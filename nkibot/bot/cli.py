"""`nkibot serve | dispatch | replay`: the webhook service, its dispatcher, and a replayer."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from nkibot.config.settings import Settings


def _settings(*, service: bool = True) -> Settings:
    """Settings for `serve`/`dispatch`: secrets into memory, out of the environment, and
    the process non-dumpable (nkibot.config.hygiene); `replay` is a client tool."""
    from nkibot.config.settings import Settings
    from nkibot.logging import configure

    if service:
        from nkibot.config.hygiene import process_settings

        settings = process_settings()
    else:
        settings = Settings()
    configure(settings.log_level, settings.log_json)
    return settings


def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8080,
    dispatcher: Annotated[
        bool | None, typer.Option(help="run the dispatcher in-process (default: settings)")
    ] = None,
) -> None:
    """Serve POST /webhook, /healthz, /readyz and /metrics with uvicorn."""
    import uvicorn

    from nkibot.bot.app import create_app

    settings = _settings()
    if dispatcher is not None:
        settings = settings.model_copy(update={"dispatcher_enabled": dispatcher})
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning",
                access_log=False, server_header=False)


def dispatch(
    once: Annotated[bool, typer.Option(help="drain the inbox, then exit")] = False,
) -> None:
    """Run the dispatcher alone: inbox -> decisions -> check runs, comments, jobs."""
    from nkibot.bot.dispatcher import Dispatcher
    from nkibot.jobs.factory import open_job_state, open_named_queue

    settings = _settings()
    worker = Dispatcher(settings, open_named_queue("inbox", settings),
                        open_named_queue("jobs", settings), open_job_state(settings))

    async def main() -> None:
        if once:
            typer.echo(f"dispatched {await worker.drain()} deliveries")
            return
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await worker.run(stop)

    asyncio.run(main())


def replay(
    file: Annotated[Path, typer.Argument(help="payload.json (headers.json beside it is read)")],
    url: Annotated[str, typer.Option(help="webhook URL, e.g. http://127.0.0.1:8080/webhook")],
    secret: Annotated[str | None, typer.Option(help="webhook secret (default: settings)")] = None,
    event: Annotated[str | None, typer.Option(help="X-GitHub-Event override")] = None,
    delivery: Annotated[str | None, typer.Option(help="X-GitHub-Delivery override")] = None,
) -> None:
    """Sign a saved payload and POST it, like probot's `receive`."""
    import httpx

    from nkibot.bot.replay import signed_request

    if secret is None:
        settings = _settings(service=False)
        secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
    if not secret:
        raise typer.BadParameter("no --secret and no NKIBOT_WEBHOOK_SECRET")
    headers, body = signed_request(file, secret, event=event, delivery=delivery)
    resp = httpx.post(url, content=body, headers=headers, timeout=30.0)
    typer.echo(f"{resp.status_code} {resp.text}")
    if resp.status_code >= 400:
        raise typer.Exit(1)
