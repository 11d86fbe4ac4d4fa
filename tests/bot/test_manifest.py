"""app.yml and the Dockerfile agree with what the service handles and how it starts."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from nkibot.bot.delivery import STORED_EVENTS
from nkibot.cli import app

ROOT = Path(__file__).resolve().parents[2]


class TestManifest:
    def test_events_and_minimal_permissions(self) -> None:
        """The manifest subscribes to exactly the stored events, with the minimal permissions."""
        manifest = yaml.safe_load((ROOT / "app.yml").read_text())
        assert set(manifest["default_events"]) == STORED_EVENTS
        assert manifest["default_permissions"] == {
            "checks": "write", "contents": "write", "pull_requests": "write",
            "issues": "write", "metadata": "read"}


class TestDockerfile:
    def test_non_root_healthcheck_and_serve(self) -> None:
        """The image runs as a non-root user, probes /healthz, and starts `nkibot serve`."""
        text = (ROOT / "Dockerfile").read_text()
        assert "FROM python:3.11-slim" in text and "USER nkibot" in text
        assert "HEALTHCHECK" in text and "/healthz" in text
        assert 'CMD ["nkibot", "serve", "--host", "0.0.0.0", "--port", "8080"]' in text
        result = CliRunner().invoke(app, ["serve", "--help"])
        assert result.exit_code == 0 and "--host" in result.output and "--port" in result.output
