"""Can this process act as the App? Its credentials, and one authenticated call to GitHub.

`GET /app` with the App's JWT answers both questions at once: GitHub is reachable, and
it accepts the App id and key. It also lists the events the App is subscribed to. Used
by `/readyz` (cached there) and the start-up line; no retries, a short timeout, since a
probe that waits is a probe that fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from githubkit import AppAuthStrategy, GitHub
from githubkit.exception import GitHubException, RequestFailed

from nkibot.config.settings import Settings
from nkibot.redact import redact

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class AppReach:
    ok: bool
    detail: str
    #: The events GitHub sends this App (empty when unknown).
    events: tuple[str, ...] = ()


def missing_credentials(settings: Settings) -> str | None:
    """Which App credential is absent or unusable, or None when both are there."""
    pem = _pem(settings)
    missing = [name for name, absent in (("NKIBOT_APP_ID", settings.app_id is None),
                                         ("private key", not pem)) if absent]
    if missing:
        return (f"no {' and no '.join(missing)}, so every delivery will fail: set "
                "NKIBOT_APP_ID and NKIBOT_PRIVATE_KEY (or NKIBOT_PRIVATE_KEY_PATH)")
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key((pem or "").encode(), password=None)
    except (ValueError, TypeError):
        return ("the App's private key is not a valid PEM: download a new one from the "
                "App's settings page")
    return None


def _pem(settings: Settings) -> str | None:
    try:
        return settings.private_key_pem()
    except OSError:
        return None


async def reach_app(settings: Settings) -> AppReach:
    """`GET /app` as the App: reachable and accepted, or why not."""
    if (why := missing_credentials(settings)) is not None:
        return AppReach(False, why)
    assert settings.app_id is not None
    client = GitHub(AppAuthStrategy(settings.app_id, _pem(settings) or ""),
                    base_url=settings.github_url, auto_retry=False, timeout=PROBE_TIMEOUT_S,
                    http_cache=False)
    try:
        app = (await client.rest.apps.async_get_authenticated()).parsed_data
    except RequestFailed as exc:
        code = exc.response.status_code
        return AppReach(False, f"GitHub at {settings.github_url} refused the App's credentials"
                        f" ({code})" if code in (401, 403) else
                        f"GitHub at {settings.github_url} answered {code}")
    except (GitHubException, httpx.HTTPError, OSError, ValueError) as exc:
        return AppReach(False, redact(f"GitHub at {settings.github_url} is unreachable: "
                                      f"{type(exc).__name__}: {exc}")[:300])
    if app is None:
        return AppReach(False, f"GitHub at {settings.github_url} has no App {settings.app_id}")
    return AppReach(True, f"App {app.slug or app.id} (id {app.id}) accepted by "
                    f"{settings.github_url}", tuple(app.events or ()))
