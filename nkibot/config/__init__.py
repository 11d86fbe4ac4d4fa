"""Settings (process-wide) and RepoConfig (per repository)."""

from nkibot.config.settings import PERMISSION_ORDER, Permission, Settings, permission_at_least

__all__ = ["PERMISSION_ORDER", "Permission", "Settings", "permission_at_least"]
