"""Jobs and the queues that carry them (SQLite by default, SQS in AWS)."""

from nkibot.jobs.model import Job, JobOptions, ShapeOverride, Trigger, job_id, target_slug
from nkibot.jobs.queue import Lease, Queue

__all__ = ["Job", "JobOptions", "Lease", "Queue", "ShapeOverride", "Trigger", "job_id", "target_slug"]
