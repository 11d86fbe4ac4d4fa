"""Redaction of published text (nkibot.redact): known values and key-shaped strings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nkibot import redact
from nkibot.results import Diagnostic, VerifyResult

PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n"
       "Rgb5XlKMo0rkNq7uZ7Fm6h8xYsh4Sy9nUq2gkxJ2Vq1wR8hz\n-----END RSA PRIVATE KEY-----\n")


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


class TestShapes:
    @pytest.mark.parametrize("secret", [
        "ghp_" + "a1B2" * 9, "ghs_" + "Z9y8" * 9, "github_pat_11ABCDEFG0" + "x" * 40,
        "AKIAABCDEFGHIJKLMNOP", "ASIAABCDEFGHIJKLMNOP", "sk-ant-api03-" + "q" * 40,
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjM0NSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ",
    ])
    def test_key_shapes_are_removed(self, secret: str) -> None:
        """GitHub, AWS, Anthropic and JWT shapes go whoever they belong to."""
        out = redact.redact(f"found {secret} here")
        assert secret not in out and out == "found [redacted] here"

    def test_pem_blocks_are_removed(self) -> None:
        """A whole PEM block goes, even one cut off before its END line."""
        assert "MIIE" not in redact.redact(f"key: {PEM}")
        assert "MIIE" not in redact.redact(PEM[:80])

    @pytest.mark.parametrize("text", [
        'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
        '{"webhook_secret": "0123456789abcdef0123456789abcdef"}',
        "API_KEY=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA",
    ])
    def test_opaque_values_after_keyish_names(self, text: str) -> None:
        """Long opaque values after secret-ish names are removed; the name stays."""
        out = redact.redact(text)
        assert "[redacted]" in out and "EXAMPLEKEY" not in out and "0123456789abcdef0" not in out

    @pytest.mark.parametrize("text", [
        "max_abs 1.2e-05 over 4096 elements", "head_sha 0123456789abcdef0123456789abcdef01234567",
        "tokens: 12000 in, 300 out", "static:numpy-name np.random",
    ])
    def test_ordinary_text_survives(self, text: str) -> None:
        """Statistics, SHAs and reasons are left alone."""
        assert redact.redact(text) == text


class TestKnownValues:
    def test_registered_values_and_encodings(self) -> None:
        """A registered secret goes in any form it leaks: whole, escaped, line by line."""
        redact.register([PEM, "hunter2-webhook-secret", "short", None])
        assert "hunter2-webhook-secret" not in redact.redact("s=hunter2-webhook-secret!")
        escaped = PEM.replace("\n", "\\n")
        assert "MIIE" not in redact.redact(f"env NKIBOT_PRIVATE_KEY={escaped}")
        line = PEM.splitlines()[2]
        assert line not in redact.redact(f"line: {line}")
        assert redact.redact("short") == "short"  # too short to register

    def test_models_and_data(self) -> None:
        """Results are redacted field by field and keep their type."""
        redact.register(["plain-secret-value-42"])
        result = VerifyResult(passed=False, reasons=["kernel:error boom plain-secret-value-42"],
                              diagnostics=[Diagnostic(rule="x", message="plain-secret-value-42")])
        clean = redact.redact_model(result)
        assert isinstance(clean, VerifyResult) and "plain-secret" not in clean.model_dump_json()
        assert redact.redact_data({"a": ["plain-secret-value-42", 1]}) == {"a": ["[redacted]", 1]}
