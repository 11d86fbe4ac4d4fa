"""Process hygiene for the long-running services: secrets in memory only, no core dumps.

`process_settings()` is what `nkibot runner`, `serve` and `dispatch` call first:

1. read the settings, including the secrets file named by `NKIBOT_SECRETS_FILE` (which
   must belong to this uid and be unreadable by anyone else) and the App key file;
2. register every secret value with `nkibot.redact`, so no published text carries one;
3. remove the secrets from the process environment, and overwrite them in the initial
   environment block too (what `/proc/<pid>/environ` shows), so neither children nor a
   reader of /proc find them; AWS keys move into boto3's default session first;
4. mark the process non-dumpable (`PR_SET_DUMPABLE=0`): no core files, and other
   processes of the same uid can no longer read its `/proc/<pid>/environ` or memory.

Linux only for 3 (the block) and 4; elsewhere they are skipped, and `dumpable()` says so.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from nkibot import redact
from nkibot.config.settings import Settings

#: Environment variables that hold credentials (ours and the SDKs' own names).
SECRET_ENV = ("NKIBOT_PRIVATE_KEY", "NKIBOT_WEBHOOK_SECRET", "NKIBOT_ANTHROPIC_API_KEY",
              "ANTHROPIC_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
              "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
_AWS = {"AWS_ACCESS_KEY_ID": "aws_access_key_id",
        "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
        "AWS_SESSION_TOKEN": "aws_session_token"}
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4


class SecretsFileError(RuntimeError):
    """The secrets file is missing, not ours, or readable by someone else."""


def check_secrets_file(path: Path) -> None:
    """Refuse a secrets file that another uid (the sandbox's) could read."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SecretsFileError(f"secrets file {path}: {exc.strerror}") from exc
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretsFileError(
            f"secrets file {path} must belong to uid {os.geteuid()} with mode 0400 or 0600 "
            f"(it is uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}): "
            f"chown {os.geteuid()} {path} && chmod 0400 {path}")


def process_settings(environ: MutableMapping[str, str] | None = None) -> Settings:
    """Settings for a service process, with the hygiene steps of the module docstring."""
    env = os.environ if environ is None else environ
    secrets_file = env.get("NKIBOT_SECRETS_FILE")
    kwargs: dict[str, Any] = {}
    if secrets_file:
        check_secrets_file(Path(secrets_file))
        kwargs["_env_file"] = (".env", secrets_file)
    settings = Settings(**kwargs)
    pem = settings.private_key_pem()
    if pem and settings.private_key is None:  # the key file, read once into memory
        settings = settings.model_copy(update={"private_key": SecretStr(pem)})
    aws = {arg: env[name] for name, arg in _AWS.items() if env.get(name)}
    register_secrets(settings, [*aws.values(), *(env.get(n) for n in SECRET_ENV)])
    if aws:
        import boto3

        boto3.setup_default_session(
            aws_access_key_id=aws.get("aws_access_key_id"),
            aws_secret_access_key=aws.get("aws_secret_access_key"),
            aws_session_token=aws.get("aws_session_token"))
    scrub_environment(env)
    make_non_dumpable()
    return settings


def register_secrets(settings: Settings, extra: list[str | None]) -> None:
    """Tell the redactor every secret this process holds."""
    values = [settings.private_key_pem()]
    for secret in (settings.webhook_secret, settings.anthropic_api_key):
        values.append(secret.get_secret_value() if secret is not None else None)
    redact.register([*values, *extra])


def scrub_environment(env: MutableMapping[str, str]) -> list[str]:
    """Remove the secret variables from `env`; for os.environ, wipe the initial block too."""
    names = [n for n in SECRET_ENV if n in env]
    for name in names:
        del env[name]
    if env is os.environ and names:
        wipe_initial_environ(names)
    return names


def wipe_initial_environ(names: list[str]) -> int:
    """Overwrite `NAME=value` for `names` in this process's initial environment block.

    `unsetenv` only drops the pointer; the bytes stay where the kernel put them at exec,
    and `/proc/<pid>/environ` reads exactly that region. Returns the entries wiped.
    """
    if sys.platform != "linux":
        return 0
    start, end = _environ_region()
    if not start or end <= start:
        return 0
    block = ctypes.string_at(start, end - start)
    wiped, offset = 0, 0
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name.decode("latin-1") in names and value:
            ctypes.memset(start + offset + len(name) + 1, ord("*"), len(value))
            wiped += 1
        offset += len(entry) + 1
    return wiped


def _environ_region() -> tuple[int, int]:
    """(env_start, env_end) from /proc/self/stat (fields 50 and 51, Linux 3.5+)."""
    text = Path("/proc/self/stat").read_text()
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[47]), int(fields[48])
    except (IndexError, ValueError):
        return 0, 0


def make_non_dumpable() -> bool:
    """`prctl(PR_SET_DUMPABLE, 0)`; False where the platform has no prctl."""
    if sys.platform != "linux":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    return True


def dumpable() -> int | None:
    """This process's dumpable flag: `prctl(PR_GET_DUMPABLE)`, checked against the
    `Dumpable:` line of /proc/self/status where the kernel prints one (None off Linux)."""
    if sys.platform != "linux":
        return None
    flag = int(ctypes.CDLL(None).prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Dumpable:") and int(line.split()[1]) != flag:
            raise RuntimeError(f"prctl says dumpable={flag}, /proc/self/status: {line}")
    return flag
