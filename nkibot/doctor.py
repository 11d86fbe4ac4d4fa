"""`nkibot doctor`: is this host ready for its role (service, runner, local)? Suggests fixes.

Each check is a pure function of Settings and injected probes, so tests drive every
branch without a device or AWS. Secrets are checked (present, parseable) and never printed.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from nkibot.backends.neuron import devices
from nkibot.backends.neuron.devices import NeuronDevice
from nkibot.config.platform import describe_platform, resolve_platform
from nkibot.config.settings import Settings
from nkibot.verify.isolation import Isolation

if TYPE_CHECKING:  # the queues are the service's: `nkibot convert` does not load them
    from nkibot.jobs.factory import QueueName
    from nkibot.jobs.queue import DeadLetter

Role = Literal["service", "runner", "local"]
Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None


def _queue_depth(settings: Settings) -> int:
    from nkibot.jobs.factory import open_named_queue

    return open_named_queue("jobs", settings).depth()


def _dead_letters(settings: Settings, name: QueueName) -> tuple[int, list[DeadLetter]] | None:
    from nkibot.jobs.factory import open_named_queue
    from nkibot.jobs.queue import DeadLetterReport

    queue = open_named_queue(name, settings)
    return queue.dead_report() if isinstance(queue, DeadLetterReport) else None


def _aws_credentials() -> bool:
    import boto3

    return boto3.Session().get_credentials() is not None


def _isolation(settings: Settings) -> Isolation:
    from nkibot.verify.isolation import configure_from

    return configure_from(settings)


@dataclass
class Probes:
    versions: Callable[[], dict[str, str | None]] = devices.sdk_versions
    neuron_devices: Callable[[], list[NeuronDevice]] = devices.list_devices
    official_nki: Callable[[], bool] = devices.official_nki_available
    queue_depth: Callable[[Settings], int] = _queue_depth
    dead_letters: Callable[[Settings, QueueName], tuple[int, list[DeadLetter]] | None] = (
        _dead_letters)
    aws_credentials: Callable[[], bool] = _aws_credentials
    isolation: Callable[[Settings], Isolation] = _isolation
    python: str = field(default_factory=platform.python_version)
    #: The Trainium generation of this host's device (None: no device).
    generation: Callable[[], str | None] = devices.device_generation


def check_sdk(versions: dict[str, str | None], official: bool, role: Role) -> Check:
    shown = ", ".join(f"{k} {versions.get(k) or '-'}" for k in ("nki", "neuronx-cc",
                                                                 "torch-neuronx"))
    if official and versions.get("neuronx-cc"):
        return Check("neuron sdk", "ok", shown)
    fix = ("on the Trn1 host: pip install --extra-index-url https://pip.repos.neuron.amazonaws.com"
           " 'neuronx-cc==2.*' torch-neuronx nki")
    return Check("neuron sdk", "fail" if role == "runner" else "warn",
                 f"{shown} (the simulator is used without it)", fix)


def check_devices(found: list[NeuronDevice], role: Role) -> Check:
    cores = devices.all_core_ids(found)
    if cores:
        return Check("neuron devices", "ok", f"{len(found)} devices, {len(cores)} NeuronCores")
    return Check("neuron devices", "fail" if role == "runner" else "warn",
                 "no Neuron device (neuron-ls found none)",
                 "run the runner on a trn1 instance with the Neuron DLAMI")


def check_queue(settings: Settings, depth: Callable[[Settings], int], role: Role) -> Check:
    try:
        n = depth(settings)
    except Exception as exc:  # any failure to reach the queue is the finding itself
        status: Status = "warn" if role == "local" else "fail"
        return Check("queue", status, f"unreachable: {type(exc).__name__}: {exc}",
                     "check NKIBOT_QUEUE_URL / NKIBOT_JOBS_QUEUE_URL and AWS credentials")
    return Check("queue", "ok", f"reachable, {n} jobs queued")


def check_dead_letters(settings: Settings, role: Role,
                       report: Callable[[Settings, QueueName], tuple[int, list[DeadLetter]] | None],
                       ) -> Check:
    """Items that used up their attempts, with the newest one's cause (kept in its row)."""
    name: QueueName = "inbox" if role == "service" else "jobs"
    try:
        found = report(settings, name)
    except Exception as exc:  # the queue check above says why; this one just can't tell
        return Check(f"{name} dead letters", "warn", f"not read: {type(exc).__name__}")
    if found is None:
        return Check(f"{name} dead letters", "ok",
                     "kept by SQS's dead-letter queue (its alarm reports them)")
    count, newest = found
    if count == 0:
        return Check(f"{name} dead letters", "ok", "none")
    last = newest[0]
    return Check(f"{name} dead letters", "warn",
                 f"{count} dead; newest {last.item_id}: {last.reason}",
                 "fix the cause, then redeliver from the App's Advanced page "
                 "(the log's 'dead-lettered' line has the stack)")


def check_github_app(settings: Settings, role: Role) -> Check:
    need: Status = "warn" if role == "local" else "fail"
    try:
        pem = settings.private_key_pem()
    except OSError as exc:
        return Check("github app", need, f"private key file unreadable ({exc.strerror})",
                     "fix NKIBOT_PRIVATE_KEY_PATH")
    if settings.app_id is None or pem is None:
        return Check("github app", need, "app id or private key missing",
                     "set NKIBOT_APP_ID and NKIBOT_PRIVATE_KEY (or NKIBOT_PRIVATE_KEY_PATH)")
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        return Check("github app", need, "private key present but not a valid PEM",
                     "download a new private key from the App's settings page")
    return Check("github app", "ok", f"app id {settings.app_id}, private key valid")


def check_webhook_secret(settings: Settings, role: Role) -> Check:
    if settings.webhook_secret is not None:
        return Check("webhook secret", "ok", "present")
    return Check("webhook secret", "fail" if role == "service" else "warn", "missing",
                 "set NKIBOT_WEBHOOK_SECRET to the App's webhook secret")


def check_models(settings: Settings, aws: bool, role: Role) -> Check:
    have = [name for name, ok in (("Anthropic API key", settings.anthropic_api_key is not None),
                                  ("AWS credentials (Bedrock)", aws)) if ok]
    if have:
        return Check("model credentials", "ok", " and ".join(have) + " present")
    return Check("model credentials", "fail" if role == "runner" else "warn",
                 "none: only the deterministic lowering can run",
                 "set NKIBOT_ANTHROPIC_API_KEY, or give the host AWS credentials for Bedrock")


def check_sandbox(found: Isolation, role: Role, allow_reduced: bool) -> Check:
    """The isolation untrusted code gets here; a runner refuses jobs when it is reduced."""
    if found.level == "full":
        return Check("sandbox", "ok", f"isolation {found.describe()}")
    refused = role == "runner" and not allow_reduced
    detail = f"isolation {found.describe()}" + (
        "; the runner refuses untrusted jobs" if refused else
        "; accepted by NKIBOT_ALLOW_REDUCED_ISOLATION=1" if allow_reduced else "")
    return Check("sandbox", "fail" if refused else "warn", detail, "; ".join(found.fixes))


def check_generation(settings: Settings, device: str | None) -> Check:
    """Which generation kernels are checked for here, and why (repo config may override)."""
    chosen = resolve_platform(None, settings.target, device)
    why = ("NKIBOT_TARGET" if settings.target else f"this host's {device} device" if device
           else "no device: nkibot's reference runner")
    detail = f"{describe_platform(chosen)} ({why}; a repo's `target:` overrides it)"
    if device and chosen != device and settings.backend == "neuron":
        return Check("trainium generation", "warn", detail + f", but the device is a {device}",
                     f"unset NKIBOT_TARGET or run this runner on a {chosen} instance")
    return Check("trainium generation", "ok", detail)


def run_checks(settings: Settings, role: Role, probes: Probes) -> list[Check]:
    versions = probes.versions()
    checks = [
        Check("python", "ok", probes.python),
        Check("torch", "ok" if versions.get("torch") else "fail", versions.get("torch") or
              "missing", None if versions.get("torch") else "pip install torch"),
        check_sdk(versions, probes.official_nki(), role),
        check_devices(probes.neuron_devices(), role),
        check_generation(settings, probes.generation()),
    ]
    if role != "local" or settings.queue_url.startswith("sqs://"):
        checks.append(check_queue(settings, probes.queue_depth, role))
    if role != "local":
        checks.append(check_dead_letters(settings, role, probes.dead_letters))
    checks += [
        check_github_app(settings, role),
        check_webhook_secret(settings, role),
        check_models(settings, probes.aws_credentials(), role),
        check_sandbox(probes.isolation(settings), role, settings.allow_reduced_isolation),
    ]
    return checks


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0


def doctor(
    role: Annotated[str, typer.Option(help="service | runner | local")] = "local",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Check the SDK, devices, queue, credentials and sandbox for ROLE; suggest fixes."""
    if role not in ("service", "runner", "local"):
        raise typer.BadParameter("role must be service, runner or local")
    checks = run_checks(Settings(), role, Probes())  # type: ignore[arg-type]
    if as_json:
        typer.echo(json.dumps({"role": role, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"nkibot doctor (role: {role})")
        for column in ("check", "status", "detail", "fix"):
            # Fold, never cut: a fix is a command or a URL to copy whole.
            table.add_column(column, overflow="fold")
        colour = {"ok": "green", "warn": "yellow", "fail": "red"}
        for c in checks:
            table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix or "")
        Console().print(table)
    raise typer.Exit(exit_code(checks))
