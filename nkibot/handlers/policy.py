"""Who may trigger nkibot: bots never, strangers' owners never, collaborators by permission."""

from __future__ import annotations

from nkibot.config.settings import PERMISSION_ORDER, Permission, permission_at_least
from nkibot.handlers.decision import Policy
from nkibot.handlers.events import Incoming


def bot_reason(inc: Incoming) -> str | None:
    """Why the sender counts as a bot (nkibot itself included), or None for a human."""
    if inc.sender_type.lower() == "bot":
        return f"sender {inc.sender_login} is a Bot"
    if inc.sender_login.lower().endswith("[bot]"):
        return f"sender {inc.sender_login} is a [bot] login"
    return None


def owner_allowed(inc: Incoming, policy: Policy) -> bool:
    allowed = {o.lower() for o in policy.allowed_owners}
    return not allowed or inc.owner.lower() in allowed


def required_permission(policy: Policy, repo_min: str | None) -> Permission:
    """The stricter of the operator's and the repository's minimum (a repo can only raise it)."""
    rank = {p: i for i, p in enumerate(PERMISSION_ORDER)}
    need: Permission = "admin"
    for candidate in PERMISSION_ORDER:
        if candidate == policy.min_permission:
            need = candidate
    for candidate in PERMISSION_ORDER:
        if candidate == repo_min and rank[candidate] > rank[need]:
            need = candidate
    return need


def may_trigger(permission: str | None, need: Permission) -> bool:
    """The collaborator permission read from the API, never `author_association`."""
    return permission_at_least(permission, need)


def denied_text(login: str, need: Permission) -> str:
    return (
        f"Sorry @{login}, nkibot runs only for collaborators with **{need}** permission or "
        "higher on this repository. A maintainer can comment `/nki convert` or add the "
        "trigger label instead."
    )
