"""Process hygiene (nkibot.config.hygiene): secrets leave the environment, no dumps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nkibot.config.hygiene import SecretsFileError, check_secrets_file

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="prctl and /proc are Linux")

ANTHROPIC = "sk-ant-api03-" + "k" * 40
WEBHOOK = "webhook-secret-value-0123456789"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

CHILD = """
import json, os, sys
from pathlib import Path
from nkibot.config import hygiene
from nkibot.redact import redact
settings = hygiene.process_settings()
import boto3
creds = boto3.DEFAULT_SESSION.get_credentials() if boto3.DEFAULT_SESSION else None
print(json.dumps({
    "environ": Path("/proc/self/environ").read_bytes().decode("latin-1"),
    "os_environ": sorted(k for k in os.environ if "SECRET" in k or "KEY" in k),
    "dumpable": hygiene.dumpable(),
    "anthropic": settings.anthropic_api_key.get_secret_value(),
    "webhook": settings.webhook_secret.get_secret_value(),
    "aws": creds.secret_key if creds else None,
    "redacted": redact(sys.argv[1]),
}))
"""


def _run(tmp_path: Path, env_extra: dict[str, str],
         secrets: str | None = None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NKIBOT_", "AWS_"))}
    env.update(env_extra)
    if secrets is not None:
        path = tmp_path / "secrets.env"
        path.write_text(secrets)
        path.chmod(0o400)
        env["NKIBOT_SECRETS_FILE"] = str(path)
    proc = subprocess.run([sys.executable, "-c", CHILD, f"x {ANTHROPIC} {WEBHOOK} y"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


class TestProcessSettings:
    def test_secrets_leave_the_environment_and_proc(self, tmp_path: Path) -> None:
        """Secrets from the environment end up in memory only: not in os.environ, not in
        /proc/self/environ; the process is non-dumpable; redaction knows them."""
        out = _run(tmp_path, {"NKIBOT_ANTHROPIC_API_KEY": ANTHROPIC,
                              "NKIBOT_WEBHOOK_SECRET": WEBHOOK,
                              "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP",
                              "AWS_SECRET_ACCESS_KEY": AWS_SECRET})
        assert out["anthropic"] == ANTHROPIC and out["webhook"] == WEBHOOK
        assert out["aws"] == AWS_SECRET  # moved into boto3's default session
        environ = str(out["environ"])
        for secret in (ANTHROPIC, WEBHOOK, AWS_SECRET, "AKIAABCDEFGHIJKLMNOP"):
            assert secret not in environ
        assert out["os_environ"] == []
        assert out["dumpable"] == 0
        assert out["redacted"] == "x [redacted] [redacted] y"

    def test_secrets_file_is_read_into_memory(self, tmp_path: Path) -> None:
        """NKIBOT_SECRETS_FILE supplies the secrets without their ever being env vars."""
        out = _run(tmp_path, {}, secrets=f"NKIBOT_ANTHROPIC_API_KEY={ANTHROPIC}\n"
                                         f"NKIBOT_WEBHOOK_SECRET={WEBHOOK}\n")
        assert out["anthropic"] == ANTHROPIC and out["webhook"] == WEBHOOK
        assert ANTHROPIC not in str(out["environ"]) and out["dumpable"] == 0


class TestSecretsFile:
    def test_group_readable_file_is_refused(self, tmp_path: Path) -> None:
        """A secrets file another uid could read is refused with the fix."""
        path = tmp_path / "secrets.env"
        path.write_text("NKIBOT_WEBHOOK_SECRET=x\n")
        path.chmod(0o640)
        with pytest.raises(SecretsFileError, match="chmod 0400"):
            check_secrets_file(path)
        path.chmod(0o400)
        check_secrets_file(path)

    def test_missing_file_is_refused(self, tmp_path: Path) -> None:
        """A missing secrets file is a clear error, not a silent empty config."""
        with pytest.raises(SecretsFileError, match="No such file"):
            check_secrets_file(tmp_path / "absent.env")
