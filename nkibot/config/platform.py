"""The Trainium generation a kernel is checked for: trn1, trn2 or trn3.

Called "target" in the user-facing settings (`target:` in `.github/nki-bot.yml`,
`NKIBOT_TARGET`, `--target`), as the issue and NKI's own `platform_target` do; inside
nkibot it is the *platform*, because "target" already names what is converted
(`path.py::Name`). The resolution order is pure and lives here:
repository config > runner setting > the runner's device > trn1 (the reference runner).
"""

from __future__ import annotations

from typing import Literal

Platform = Literal["trn1", "trn2", "trn3"]
PLATFORMS: tuple[Platform, ...] = ("trn1", "trn2", "trn3")
#: The NeuronCore each generation has (nki/guides/architecture/*.rst).
CORES: dict[str, str] = {"trn1": "NeuronCore-v2", "trn2": "NeuronCore-v3",
                         "trn3": "NeuronCore-v4"}
#: With no setting and no device, nkibot checks for its reference runner's generation.
DEFAULT_PLATFORM: Platform = "trn1"


class PlatformError(ValueError):
    """Not a generation nkibot knows; the message lists the ones it does."""


def parse_platform(text: str) -> Platform:
    """`trn2` (any case, spaces trimmed) -> "trn2"; anything else is refused clearly."""
    value = text.strip().lower()
    if value not in PLATFORMS:
        raise PlatformError(f"{text!r} is not a Trainium generation: use trn1, trn2 or trn3")
    return value


def resolve_platform(requested: str | None, setting: str | None,
                     device: str | None) -> Platform:
    """The generation one job is checked for (first one set wins; see the docstring)."""
    for value in (requested, setting, device):
        if value:
            return parse_platform(value)
    return DEFAULT_PLATFORM


def describe_platform(platform: str) -> str:
    """`trn2` -> `trn2 (NeuronCore-v3)`, for reports and check runs."""
    core = CORES.get(platform)
    return f"{platform} ({core})" if core else platform
