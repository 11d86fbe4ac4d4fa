"""Jobs and the queues that carry them (SQLite by default, SQS in AWS)."""

from nkibot.jobs.factory import open_job_state, open_named_queue, open_queue
from nkibot.jobs.model import Job, JobOptions, ShapeOverride, Trigger, job_id, target_slug
from nkibot.jobs.queue import DeadLetter, DeadLetterSource, Lease, Queue
from nkibot.jobs.state import JobStateStore

__all__ = [
    "DeadLetter",
    "DeadLetterSource",
    "Job",
    "JobOptions",
    "JobStateStore",
    "Lease",
    "Queue",
    "ShapeOverride",
    "Trigger",
    "job_id",
    "open_job_state",
    "open_named_queue",
    "open_queue",
    "target_slug",
]
