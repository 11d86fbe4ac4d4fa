"""The one place GitHub clients are built: App (JWT) and installation (token) auth.

`base_url` comes from settings so tests point the real githubkit client at the
GitHub double. Rate limits and 5xx answers are retried by githubkit itself.
"""

from __future__ import annotations

from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub
from githubkit.retry import RetryChainDecision, RetryRateLimit, RetryServerError

from nkibot.config.settings import Settings

#: Secondary rate limits come in bursts; allow a few waits before giving up.
RETRY = RetryChainDecision(RetryRateLimit(max_retry=3), RetryServerError(max_retry=3))
TIMEOUT_S = 30.0


class GitHubAppNotConfigured(RuntimeError):
    """NKIBOT_APP_ID and a private key are needed to talk to GitHub as the App."""


def _credentials(settings: Settings) -> tuple[int, str]:
    pem = settings.private_key_pem()
    if settings.app_id is None or not pem:
        raise GitHubAppNotConfigured(
            "set NKIBOT_APP_ID and NKIBOT_PRIVATE_KEY (or NKIBOT_PRIVATE_KEY_PATH)"
        )
    return settings.app_id, pem


def app_client(settings: Settings) -> GitHub[AppAuthStrategy]:
    """Authenticated as the App itself (JWT): installations, access tokens."""
    app_id, pem = _credentials(settings)
    return GitHub(
        AppAuthStrategy(app_id, pem), base_url=settings.github_url, auto_retry=RETRY,
        timeout=TIMEOUT_S, http_cache=False,
    )


def installation_client(
    settings: Settings, installation_id: int
) -> GitHub[AppInstallationAuthStrategy]:
    """Authenticated as one installation; githubkit fetches and caches its token."""
    app_id, pem = _credentials(settings)
    return GitHub(
        AppInstallationAuthStrategy(app_id, pem, installation_id),
        base_url=settings.github_url, auto_retry=RETRY, timeout=TIMEOUT_S, http_cache=False,
    )
