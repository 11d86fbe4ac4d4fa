"""pytest fixtures for the GitHub double, the test App's credentials, and signed webhooks."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit.webhooks import sign

from nkibot.config.settings import Settings
from tests.fakes.github import GitHubDouble
from tests.fakes.server import ServerThread

TEST_APP_ID = 4242
TEST_WEBHOOK_SECRET = "test-webhook-secret"
WEBHOOK_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "webhooks"


def load_webhook(scenario: str) -> tuple[dict[str, str], bytes]:
    """The saved headers (lower-cased) and raw payload of tests/fixtures/webhooks/<scenario>."""
    folder = WEBHOOK_FIXTURES / scenario
    headers = {k.lower(): v for k, v in json.loads((folder / "headers.json").read_text()).items()}
    return headers, (folder / "payload.json").read_bytes()


def signed_headers(body: bytes, event: str, delivery: str | None = None,
                   secret: str = TEST_WEBHOOK_SECRET) -> dict[str, str]:
    """Headers GitHub would send with `body`: event, delivery id and sha256 signature."""
    return {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery or str(uuid.uuid4()),
        "x-hub-signature-256": sign(secret, body, "sha256"),
    }


@pytest.fixture(scope="session")
def github_app_key() -> tuple[str, str]:
    """(private PEM, public PEM) of the test App, generated once per session."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.fixture(scope="session")
def github_app_id() -> int:
    return TEST_APP_ID


@pytest.fixture(scope="session")
def _github_server(github_app_key: tuple[str, str]) -> Iterator[GitHubDouble]:
    double = GitHubDouble(TEST_APP_ID, github_app_key[1])
    with ServerThread(double.asgi) as url:
        double.base_url = url
        yield double


@pytest.fixture
def github_double(_github_server: GitHubDouble) -> Iterator[GitHubDouble]:
    """The running GitHub double, emptied for this test; fails it on any auth error."""
    _github_server.reset()
    yield _github_server
    assert not _github_server.errors, _github_server.errors


@pytest.fixture
def github_settings(github_double: GitHubDouble, github_app_key: tuple[str, str],
                    tmp_path: Path) -> Settings:
    """Settings pointing at the double, the test App, and a fresh SQLite queue file."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        app_id=TEST_APP_ID,
        private_key=github_app_key[0],
        webhook_secret=TEST_WEBHOOK_SECRET,
        github_url=github_double.base_url,
        queue_url=f"sqlite:///{tmp_path / 'queue.db'}",
        dispatcher_enabled=False,
        dispatch_poll_s=0.05,
    )
