"""Choose and escalate model backends for one task.

`auto` tries the deterministic lowering first (it declines fast when it cannot trace
the reference), then Claude through the Anthropic API when a key is configured, else
Claude through Bedrock when AWS credentials are. A cheaper backend that fails twice in
a row hands over to the next one, with its last kernel and error carried forward. The
lowering is deterministic, so it gets one turn: asked again it would only repeat itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nkibot.config.settings import Settings
from nkibot.convert.models.base import ModelBackend

ModelChoice = Literal["auto", "lowering", "claude", "bedrock"]
Decision = Literal["continue", "escalate", "stop"]

NO_CREDENTIALS = "no ANTHROPIC_API_KEY or AWS credentials"


class RouterError(Exception):
    """The requested model cannot run here; the message says what is missing."""


@dataclass
class Router:
    """The chain of backends for one task, cheapest first, and where we are in it."""

    chain: Sequence[ModelBackend]
    escalate_after: int = 2
    #: Why later backends are absent (e.g. no credentials), for the final reasons.
    unavailable: str | None = None
    _index: int = 0
    _failures: int = 0
    history: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.chain:
            raise RouterError("no model backend available")
        self.history.append(self.chain[0].label)

    @property
    def current(self) -> ModelBackend:
        return self.chain[self._index]

    @property
    def is_last(self) -> bool:
        return self._index == len(self.chain) - 1

    @property
    def is_precursor(self) -> bool:
        """A cheaper backend tried before the main one: its turns do not use the budget."""
        return not self.is_last

    def _limit(self) -> int:
        return 1 if self.current.deterministic else self.escalate_after

    def after_turn(self, *, verified: bool, declined: bool = False, broken: bool = False
                   ) -> Decision:
        """Decide what follows a turn. `broken`: the backend itself errored (API failure)."""
        if verified:
            self._failures = 0
            return "continue"
        self._failures += 1
        exhausted = declined or broken or self._failures >= self._limit()
        if not exhausted:
            return "continue"
        if self.is_last:
            deterministic = self._limit() == 1
            return "stop" if (declined or broken or deterministic) else "continue"
        self._index += 1
        self._failures = 0
        self.history.append(self.current.label)
        return "escalate"

    async def aclose(self) -> None:
        """Close the backends' HTTP clients (a backend without one closes nothing)."""
        for backend in self.chain:
            await backend.aclose()

    def models_used(self) -> str:
        return " -> ".join(dict.fromkeys(self.history))

    def exhausted_reason(self, what: str) -> str:
        """Plain words for a stop of the last backend, e.g. the lowering-only case."""
        name = self.current.name
        if name == "lowering" and self.unavailable:
            return (f"only the deterministic lowering was available ({self.unavailable}); "
                    f"it {what}")
        return f"the {name} backend {what}"


def build_router(
    model: str,
    *,
    settings: Settings,
    bedrock_available: bool,
    lowering: Callable[[], ModelBackend | None],
    claude: Callable[[Settings], ModelBackend],
    bedrock: Callable[[Settings], ModelBackend],
) -> Router:
    """The router for `--model`; factories keep SDK clients unbuilt until chosen."""
    has_key = settings.anthropic_api_key is not None
    if model == "lowering":
        backend = lowering()
        if backend is None:
            raise RouterError("the deterministic lowering backend is not installed")
        return Router([backend])
    if model == "claude":
        if not has_key:
            raise RouterError("--model claude needs NKIBOT_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY")
        return Router([claude(settings)])
    if model == "bedrock":
        if not bedrock_available:
            raise RouterError("--model bedrock needs AWS credentials and a region")
        return Router([bedrock(settings)])
    if model != "auto":
        raise RouterError(f"unknown model {model!r}: use auto, lowering, claude or bedrock")
    chain: list[ModelBackend] = []
    cheap = lowering()
    if cheap is not None:
        chain.append(cheap)
    if has_key:
        chain.append(claude(settings))
    elif bedrock_available:
        chain.append(bedrock(settings))
    if not chain:
        raise RouterError(f"no model backend available: {NO_CREDENTIALS}, and no lowering")
    unavailable = None if (has_key or bedrock_available) else NO_CREDENTIALS
    return Router(chain, unavailable=unavailable)


def _lowering() -> ModelBackend | None:
    try:
        from nkibot.convert.models.lowering_backend import LoweringBackend
    except ImportError:
        return None
    backend: ModelBackend = LoweringBackend()
    return backend


def _claude(settings: Settings) -> ModelBackend:
    from nkibot.convert.models.anthropic import AnthropicBackend

    return AnthropicBackend(settings)


def _bedrock(settings: Settings) -> ModelBackend:
    from nkibot.convert.models.bedrock import BedrockBackend

    return BedrockBackend(settings)


def make_router(model: str, settings: Settings, bedrock_available: bool | None) -> Router:
    """The router for `--model`, with the real backends (SDK clients built only when chosen)."""
    if bedrock_available is None:
        needs_check = model == "bedrock" or (
            model == "auto" and settings.anthropic_api_key is None)
        if needs_check and aws_region_possible(settings):
            from nkibot.convert.models.bedrock import bedrock_available as detect

            bedrock_available = detect(settings)
    return build_router(model, settings=settings, bedrock_available=bool(bedrock_available),
                        lowering=_lowering, claude=_claude, bedrock=_bedrock)


def aws_region_possible(settings: Settings) -> bool:
    """Whether boto3 could find a region, decided without importing it (half a second).

    Bedrock needs a region; botocore reads one only from AWS_DEFAULT_REGION and the config
    file (AWS_CONFIG_FILE, default ~/.aws/config), and ours from settings. With none of
    them, and no boto3 session a service set up already, a local `nkibot convert` need not
    load boto3 to learn that Bedrock is unavailable.
    """
    if settings.aws_region or os.environ.get("AWS_DEFAULT_REGION") or "boto3" in sys.modules:
        return True
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return Path(config).expanduser().is_file()
