"""The conversion Job: what the dispatcher enqueues and a runner worker executes."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, Field

from nkibot.config.targets import ShapeOverride


class JobOptions(BaseModel):
    turns: int | None = None
    model: Literal["auto", "lowering", "claude", "bedrock"] | None = None
    backend: Literal["auto", "sim", "neuron"] | None = None
    #: Trainium generation to check for (repo config `target:`; None: the runner decides).
    platform: Literal["trn1", "trn2", "trn3"] | None = None
    atol: float | None = None
    rtol: float | None = None
    shapes: list[ShapeOverride] = Field(default_factory=list)
    reprofile_only: bool = False
    #: The PyTorch reference (`path::Name`) a CUDA or Triton target must match.
    reference: str | None = None
    optimize_turns: int | None = None
    min_speedup: float | None = None
    min_roofline_fraction: float | None = None


class Trigger(BaseModel):
    """Where the request came from, so the runner can reply there."""

    #: `dashboard`: a ticked box on the conversion dashboard issue (`issue_number`).
    kind: Literal["comment", "label", "check_run", "dashboard"]
    delivery_id: str
    #: The event's identity from its signed body (`Incoming.identity`); the job id's source.
    event_key: str = ""
    sender: str
    issue_number: int | None = None
    is_pull_request: bool = False
    comment_id: int | None = None
    #: For PRs: the head branch and whether it lives in the same repository.
    head_ref: str | None = None
    head_repo: str | None = None
    base_ref: str | None = None


class Job(BaseModel):
    id: str
    repo: str  # "owner/name"
    installation_id: int
    target: str  # "path/to/file.py::Name"
    sha: str
    trigger: Trigger
    options: JobOptions = Field(default_factory=JobOptions)
    check_run_id: int | None = None
    default_branch: str = "main"
    #: Shapes from the issue's yaml block (lower precedence than options.shapes).
    issue_shapes: list[ShapeOverride] = Field(default_factory=list)
    #: Bumped by /nki retry and the Retry action so the id (and dedupe key) changes.
    generation: int = 0

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]


def job_id(repo: str, target: str, sha: str, trigger_ref: str) -> str:
    """Deterministic job id from (repo, target, head SHA, trigger)."""
    digest = hashlib.sha256(f"{repo}\0{target}\0{sha}\0{trigger_ref}".encode()).hexdigest()
    return digest[:24]


def target_slug(target: str) -> str:
    """`src/models/norm.py::RMSNorm` -> `src-models-norm-rmsnorm` (branch `nki/<slug>`)."""
    path, _, name = target.partition("::")
    stem = path.removesuffix(".py")
    raw = f"{stem}-{name}" if name else stem
    slug = "".join(ch.lower() if ch.isalnum() else "-" for ch in raw)
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug.strip("-")[:80] or "target"
