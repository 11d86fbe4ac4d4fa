"""Queues and the job state store, chosen by URL: `sqlite:///path` or `sqs://<queue-url>`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from nkibot.config.settings import Settings
from nkibot.jobs.queue import Queue
from nkibot.jobs.sqlite import SqliteQueue
from nkibot.jobs.state import JobStateStore, SqliteJobStateStore

QueueName = Literal["inbox", "jobs"]


def sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///path` URL (`sqlite:////abs` or `sqlite:///./rel`), else None."""
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///"):]
    if not rest:
        raise ValueError(f"no file in queue URL {url!r}")
    return Path(rest)


def open_queue(url: str, name: QueueName, settings: Settings) -> Queue:
    """Open queue `name` at `url`; SQLite keeps both names in one file, SQS has one URL each."""
    path = sqlite_path(url)
    if path is not None:
        # The inbox takes every webhook commit on the service's event loop: its WAL
        # checkpoints run on a thread of their own (jobs/checkpoint.py).
        return SqliteQueue(path, name, max_attempts=settings.max_attempts,
                           background_checkpoint=name == "inbox")
    if url.startswith("sqs://"):
        from nkibot.jobs.sqs import SqsQueue, sqs_client

        queue_url = url[len("sqs://"):]
        if not queue_url.startswith(("http://", "https://")):
            queue_url = "https://" + queue_url
        return SqsQueue(sqs_client(queue_url, settings.aws_region), queue_url)
    raise ValueError(f"unsupported queue URL {url!r}: use sqlite:///path or sqs://<queue-url>")


def open_named_queue(name: QueueName, settings: Settings) -> Queue:
    """The process's `inbox` or `jobs` queue from NKIBOT_QUEUE_URL / NKIBOT_JOBS_QUEUE_URL."""
    url = settings.queue_url
    if name == "jobs" and settings.jobs_queue_url:
        url = settings.jobs_queue_url
    elif name == "jobs" and url.startswith("sqs://"):
        raise ValueError("NKIBOT_JOBS_QUEUE_URL is required with an SQS NKIBOT_QUEUE_URL")
    return open_queue(url, name, settings)


def open_job_state(settings: Settings) -> JobStateStore:
    """The job state store: NKIBOT_STATE_PATH, else the SQLite queue file, else a local file."""
    path = settings.state_path or sqlite_path(settings.queue_url) or Path("./nkibot-state.db")
    return SqliteJobStateStore(path)
