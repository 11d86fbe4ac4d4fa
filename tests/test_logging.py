"""Secrets never reach log output."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from nkibot.logging import RedactingFilter, configure, scrub


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


#: A key planted where a careless renderer would print it: a frame's locals and the message.
PLANTED = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
           "-----END PRIVATE KEY-----")
BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


def _fail_with_key(private_key: str) -> None:
    raise RuntimeError(f"could not sign with {private_key}")


def _log_failure() -> None:
    try:
        _fail_with_key(PLANTED)
    except RuntimeError:
        structlog.get_logger("t").exception("delivery failed", item="d1")


class TestExceptions:
    def test_console_traceback_has_no_locals_and_no_key(
            self, capsys: pytest.CaptureFixture[str]) -> None:
        """The console renderer prints the stack, not the frame's locals, and no key."""
        configure("info", json=False)
        _log_failure()
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "_fail_with_key" in err
        assert "RuntimeError: could not sign with [redacted]" in err
        assert BODY not in err and "BEGIN PRIVATE" not in err and "locals" not in err

    def test_json_carries_type_message_and_stack(
            self, capsys: pytest.CaptureFixture[str]) -> None:
        """JSON: the exception's type, message and stack, redacted; never `exc_info: true`."""
        configure("info", json=True)
        _log_failure()
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert "exc_info" not in line
        exc = line["exception"]
        assert exc["type"] == "RuntimeError"
        assert exc["message"] == "could not sign with [redacted]"
        assert "_fail_with_key" in exc["stack"] and exc["stack"].endswith(exc["message"])
        assert BODY not in json.dumps(line)

    def test_stdlib_records_get_the_same_redacted_traceback(self) -> None:
        """uvicorn's and httpx's records: a redacted stack, no locals, no key."""
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.addFilter(RedactingFilter())
        std = logging.getLogger("nkibot.test.stdlib")
        std.addHandler(handler)
        std.propagate = False
        try:
            _fail_with_key(PLANTED)
        except RuntimeError:
            std.exception("request failed")
        out = stream.getvalue()
        assert "_fail_with_key" in out and "could not sign with [redacted]" in out
        assert BODY not in out
