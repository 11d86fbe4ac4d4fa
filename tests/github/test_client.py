"""The client factory: App JWT and installation tokens, verified by the GitHub double."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit.exception import RequestFailed
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.github.client import GitHubAppNotConfigured, app_client, installation_client
from tests.fakes.github import GitHubDouble


class TestClientFactory:
    async def test_app_jwt_is_verified(self, github_double: GitHubDouble,
                                       github_settings: Settings) -> None:
        """The App client signs an RS256 JWT with iss = app id that the double accepts."""
        gh = app_client(github_settings)  # keep a reference: githubkit's namespaces are weak
        app = (await gh.rest.apps.async_get_authenticated()).parsed_data
        assert app is not None and app.id == github_settings.app_id
        assert github_double.calls[-1].status == 200

    @pytest.mark.parametrize(("app_id", "own_key", "why"), [
        (9001, False, "bad JWT"), (9002, True, "is not app")])
    async def test_bad_jwt_is_refused(self, github_double: GitHubDouble,
                                      github_settings: Settings, app_id: int, own_key: bool,
                                      why: str) -> None:
        """A JWT signed with another key, or naming another app, gets 401 from the double."""
        # githubkit caches JWTs per issuer for the process, hence a fresh app id per case.
        key = github_settings.private_key
        if not own_key:
            key = SecretStr(rsa.generate_private_key(public_exponent=65537, key_size=2048)
                            .private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()).decode())
        gh = app_client(github_settings.model_copy(update={"private_key": key, "app_id": app_id}))
        with pytest.raises(RequestFailed) as info:
            await gh.rest.apps.async_get_authenticated()
        assert info.value.response.status_code == 401
        assert any(why in e for e in github_double.errors)
        github_double.errors.clear()

    async def test_installation_token_is_fetched_once_and_required(
            self, github_double: GitHubDouble, github_settings: Settings) -> None:
        """The installation client gets a `ghs_` token once and sends it on every call."""
        github_double.add_repo("acme/tok", installation_id=31)
        gh = installation_client(github_settings, 31)
        for _ in range(2):
            repo = (await gh.rest.repos.async_get("acme", "tok")).parsed_data
            assert repo.default_branch == "main"
        assert len(github_double.calls_to("POST", "access_tokens")) == 1
        assert all(t.startswith("ghs_") for t in github_double.tokens)

    async def test_other_installation_cannot_read(self, github_double: GitHubDouble,
                                                  github_settings: Settings) -> None:
        """A token for one installation gets 404 on another installation's repository."""
        github_double.add_repo("acme/a", installation_id=41)
        github_double.add_repo("other/b", installation_id=42)
        gh = installation_client(github_settings, 41)
        with pytest.raises(RequestFailed) as info:
            await gh.rest.repos.async_get("other", "b")
        assert info.value.response.status_code == 404

    def test_missing_credentials(self) -> None:
        """Without NKIBOT_APP_ID and a key the factory says which variables to set."""
        with pytest.raises(GitHubAppNotConfigured, match="NKIBOT_APP_ID"):
            app_client(Settings(_env_file=None))  # type: ignore[call-arg]
