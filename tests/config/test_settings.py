"""Settings come from NKIBOT_ variables, validated once."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nkibot.config import Settings, permission_at_least


class TestSettings:
    def test_defaults_match_the_documented_names(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no variables set, the documented defaults apply."""
        monkeypatch.chdir("/")
        s = Settings(_env_file=None)
        assert s.queue_url == "sqlite:///./nkibot-queue.db"
        assert s.github_url == "https://api.github.com"
        assert s.trigger_label == "nki-candidate"
        assert s.min_permission == "write"
        assert s.allowed_owners == []

    def test_allowed_owners_is_a_comma_list(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """NKIBOT_ALLOWED_OWNERS is split on commas, trimmed and lower-cased."""
        monkeypatch.setenv("NKIBOT_ALLOWED_OWNERS", " Acme ,other,, ")
        s = Settings(_env_file=None)
        assert s.allowed_owners == ["acme", "other"]
        assert s.permits_owner("ACME") and not s.permits_owner("stranger")

    def test_bad_permission_is_rejected(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An unknown NKIBOT_MIN_PERMISSION fails validation at start-up."""
        monkeypatch.setenv("NKIBOT_MIN_PERMISSION", "superuser")
        with pytest.raises(ValidationError):
            Settings(_env_file=None)

    def test_private_key_from_value(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The PEM comes from NKIBOT_PRIVATE_KEY with escaped newlines."""
        monkeypatch.setenv("NKIBOT_PRIVATE_KEY", "-----BEGIN KEY-----\\nabc\\n-----END KEY-----")
        pem = Settings(_env_file=None).private_key_pem()
        assert pem == "-----BEGIN KEY-----\nabc\n-----END KEY-----"


class TestPermission:
    @pytest.mark.parametrize(
        ("have", "need", "ok"),
        [("admin", "write", True), ("write", "write", True), ("triage", "write", False),
         ("read", "read", True), ("none", "read", False), (None, "read", False)],
    )
    def test_ordering(self, have: str | None, need: str, ok: bool) -> None:
        """Permissions order read < triage < write < maintain < admin; unknown is none."""
        assert permission_at_least(have, need) is ok  # type: ignore[arg-type]
