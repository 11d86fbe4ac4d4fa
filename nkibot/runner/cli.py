"""`nkibot runner`: lease conversion jobs from the `jobs` queue and run them."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer


def runner(
    workers: Annotated[int | None, typer.Option(
        help="concurrent workers (default: NKIBOT_WORKERS, else one per NeuronCore, else 1)",
    )] = None,
    exit_when_idle: Annotated[bool, typer.Option(
        "--exit-when-idle", help="stop once the queue is empty (batch runs, benchmarks)",
    )] = False,
    poll: Annotated[float, typer.Option(help="seconds between polls of an empty queue")] = 1.0,
) -> None:
    """Run conversion workers until SIGTERM (each finishes its turn and releases its job)."""
    from nkibot.config.hygiene import process_settings
    from nkibot.github.client import installation_client
    from nkibot.jobs.factory import open_job_state, open_queue
    from nkibot.logging import configure
    from nkibot.runner.worker import Runner, worker_count
    from nkibot.verify.isolation import configure_from, refusal

    # Secrets into memory, out of the environment; non-dumpable (docs/security.md).
    settings = process_settings()
    configure(settings.log_level, json=settings.log_json)
    # Every job runs untrusted code: without full isolation the runner does not start.
    found = configure_from(settings)
    if (why := refusal(found, settings.allow_reduced_isolation)) is not None:
        typer.echo(why, err=True)
        raise typer.Exit(code=3)
    queue = open_queue(settings.jobs_queue_url or settings.queue_url, "jobs", settings)
    state = open_job_state(settings)
    count = workers or worker_count(settings)

    async def main() -> None:
        # The runner keeps one gateway (and so one client) per installation.
        run = Runner(settings, queue, state, lambda inst: installation_client(settings, inst),
                     poll_s=poll)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, run.stop)
        await run.serve(count, exit_when_idle=exit_when_idle)

    asyncio.run(main())
