"""Process settings, read once from `NKIBOT_*` environment variables or an env file.

Nothing else in nkibot reads `os.environ`: build a `Settings` at the edge (the CLI,
the service factory) and pass it down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Permission = Literal["read", "triage", "write", "maintain", "admin"]

#: GitHub's collaborator permission levels, weakest first.
PERMISSION_ORDER: tuple[Permission, ...] = ("read", "triage", "write", "maintain", "admin")


class Settings(BaseSettings):
    """Everything the service, dispatcher and runner need, validated at start-up."""

    model_config = SettingsConfigDict(
        env_prefix="NKIBOT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        # Fields with an alias (below) still accept their plain name in Settings(...).
        populate_by_name=True,
    )

    # GitHub App
    app_id: int | None = None
    private_key: SecretStr | None = None
    private_key_path: Path | None = None
    webhook_secret: SecretStr | None = None
    github_url: str = "https://api.github.com"
    bot_login: str = "nkibot[bot]"

    # Policy
    allowed_owners: Annotated[list[str], NoDecode] = Field(default_factory=list)
    trigger_label: str = "nki-candidate"
    min_permission: Permission = "write"

    # Queues
    queue_url: str = "sqlite:///./nkibot-queue.db"
    jobs_queue_url: str | None = None
    max_attempts: int = Field(default=3, ge=1)
    #: A job lease is short and kept alive by a heartbeat, so a runner killed mid-job
    #: costs its job at most about `lease_seconds` before another worker takes it.
    lease_seconds: float = Field(default=30.0, gt=0)
    #: How often a working runner extends its lease; default a third of `lease_seconds`.
    lease_heartbeat_s: float | None = Field(default=None, gt=0)
    #: SQLite file for job state (cancellations, retries); default: the SQLite queue file.
    state_path: Path | None = None

    # Runner
    max_jobs_per_installation: int = Field(default=2, ge=1)
    max_repo_mb: int = Field(default=200, ge=1)
    job_timeout_s: float = Field(default=3600.0, gt=0)
    workers: int | None = None
    check_run_update_interval_s: float = Field(default=10.0, ge=0)

    # Sandbox (nkibot/verify/isolation.py; docs/sandbox.md)
    #: Run untrusted jobs even where full isolation is missing (the result says so).
    allow_reduced_isolation: bool = False
    #: bubblewrap to use: a name on PATH or a path; empty turns the sandbox off (reduced).
    sandbox_bwrap: str = "bwrap"
    #: The unprivileged host uid/gid children run as when the runner is root.
    sandbox_uid: int = Field(default=65534, ge=1)
    sandbox_gid: int = Field(default=65534, ge=1)
    #: Fork a conversion's torch children (describe, lowering, reference) from one warm,
    #: fully confined sandbox that imported torch once (`nkibot.verify.zygote`); off:
    #: each starts a cold interpreter.
    warm_sandbox: bool = True
    #: Where a verification's exchange files go (`nkibot.verify.scratch`): "auto" puts
    #: them in /dev/shm (memory) when they fit, a path names another directory, and
    #: "" keeps them in the temp directory.
    scratch_dir: str = "auto"

    # Agent loop
    max_tokens_per_job: int = Field(default=500_000, ge=1)
    max_wall_s_per_job: float = Field(default=1800.0, gt=0)
    compile_timeout_s: float = Field(default=120.0, gt=0)
    default_turns: int = Field(default=10, ge=1)
    model: Literal["auto", "lowering", "claude", "bedrock"] = "auto"
    backend: Literal["auto", "sim", "neuron"] = "auto"
    #: NKIBOT_TARGET: the Trainium generation kernels are checked for on this runner when
    #: the repository does not say (None: the runner's device generation, else trn1).
    target: Literal["trn1", "trn2", "trn3"] | None = None

    # Models (the SDKs' own variables are also honoured by the SDKs themselves)
    # An explicit validation_alias replaces env_prefix for the field, so the NKIBOT_ name
    # is listed too; the SDK's own names are honoured so `nkibot convert` runs against
    # whatever ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY point at (the real API or a double).
    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("NKIBOT_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
    )
    anthropic_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("NKIBOT_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"),
    )
    # The SDK warns that claude-opus-4-5 is deprecated (end of life January 2027).
    anthropic_model: str = "claude-opus-5-5"
    anthropic_timeout_s: float = Field(default=300.0, gt=0)
    anthropic_max_retries: int = Field(default=4, ge=0)
    bedrock_model_id: str = "anthropic.claude-opus-4-5-20251101-v1:0"
    aws_region: str | None = None

    # Service
    log_level: str = "info"
    log_json: bool = True
    max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1)
    #: Run the dispatcher inside `nkibot serve` (off when `nkibot dispatch` runs apart).
    dispatcher_enabled: bool = True
    dispatch_poll_s: float = Field(default=0.5, gt=0)

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, value: object) -> object:
        return value.strip().lower() or None if isinstance(value, str) else value

    @field_validator("allowed_owners", mode="before")
    @classmethod
    def _split_owners(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip().lower() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _heartbeat_inside_lease(self) -> Settings:
        if self.lease_heartbeat_s is not None and self.lease_heartbeat_s >= self.lease_seconds:
            raise ValueError(
                f"NKIBOT_LEASE_HEARTBEAT_S ({self.lease_heartbeat_s:g}) must be shorter than "
                f"NKIBOT_LEASE_SECONDS ({self.lease_seconds:g}), or leases expire while jobs run")
        return self

    def heartbeat_seconds(self) -> float:
        """Seconds between lease extensions of a running job."""
        return self.lease_heartbeat_s or self.lease_seconds / 3

    def private_key_pem(self) -> str | None:
        """The App's PEM private key, from the value or the file, whichever is set."""
        if self.private_key is not None:
            return self.private_key.get_secret_value().replace("\\n", "\n")
        if self.private_key_path is not None:
            return self.private_key_path.read_text(encoding="utf-8")
        return None

    def permits_owner(self, owner: str) -> bool:
        return not self.allowed_owners or owner.lower() in self.allowed_owners


def permission_at_least(have: str | None, need: Permission) -> bool:
    """True when GitHub permission `have` is `need` or stronger; unknown counts as none."""
    if have not in PERMISSION_ORDER:
        return False
    return PERMISSION_ORDER.index(have) >= PERMISSION_ORDER.index(need)
