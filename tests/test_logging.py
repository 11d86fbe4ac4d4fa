"""Secrets never reach log output."""

from __future__ import annotations

import pytest
import structlog

from nkibot.logging import configure, scrub


class TestScrub:
    def test_known_token_shapes_are_redacted(self) -> None:
        """GitHub tokens, Anthropic keys, AWS key ids and PEM blocks are replaced."""
        text = (
            "token ghs_abcdefghijklmnopqrstuvwxyz0123 key sk-ant-api03-abcdefghijkl "
            "id AKIAABCDEFGHIJKLMNOP -----BEGIN RSA PRIVATE KEY-----\nxyz\n"
            "-----END RSA PRIVATE KEY-----"
        )
        out = scrub(text)
        for secret in ("ghs_abc", "sk-ant-api03", "AKIAABCD", "xyz"):
            assert secret not in out

    def test_log_lines_redact_secret_keys(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A field named like a secret is redacted whatever its value."""
        configure("info", json=True)
        structlog.get_logger().info("event", webhook_secret="hunter2", note="fine")
        err = capsys.readouterr().err
        assert "hunter2" not in err and "fine" in err
