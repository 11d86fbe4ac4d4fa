"""The router picks backends by availability and escalates cheaper ones that fail."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from nkibot.config.settings import Settings
from nkibot.convert.models.base import Conversation, ModelBackend, ModelBackendBase, ModelReply
from nkibot.convert.models.router import Router, RouterError, build_router


class Named(ModelBackendBase):
    """A model seam stand-in with a name and declared determinism; routing never calls
    turn(). Only the backend named "lowering" is deterministic here, as in the real chain."""

    def __init__(self, name: str, *, deterministic: bool | None = None) -> None:
        self.name = name
        self.deterministic = name == "lowering" if deterministic is None else deterministic

    async def turn(self, conversation: Conversation) -> ModelReply:
        raise AssertionError("routing decisions must not call the model")


def _build(model: str, *, key: bool, bedrock: bool, lowering: bool = True) -> Router:
    settings = Settings(_env_file=None, anthropic_api_key=SecretStr("k") if key else None)

    def low() -> ModelBackend | None:
        return Named("lowering") if lowering else None

    return build_router(model, settings=settings, bedrock_available=bedrock, lowering=low,
                        claude=lambda s: Named("claude"), bedrock=lambda s: Named("bedrock"))


def _names(router: Router) -> list[str]:
    return [b.name for b in router.chain]


class TestBuildRouter:
    @pytest.mark.parametrize(("key", "bedrock", "chain"), [
        (True, True, ["lowering", "claude"]),
        (False, True, ["lowering", "bedrock"]),
        (False, False, ["lowering"]),
    ])
    def test_auto_chain(self, key: bool, bedrock: bool, chain: list[str]) -> None:
        """auto: lowering first, then Claude with a key, else Bedrock with AWS credentials."""
        assert _names(_build("auto", key=key, bedrock=bedrock)) == chain

    def test_auto_without_credentials_says_so(self) -> None:
        """With only the lowering, the router remembers why nothing else is there."""
        router = _build("auto", key=False, bedrock=False)
        assert router.unavailable == "no ANTHROPIC_API_KEY or AWS credentials"
        assert router.exhausted_reason("declined: aten.conv2d") == (
            "only the deterministic lowering was available (no ANTHROPIC_API_KEY or AWS "
            "credentials); it declined: aten.conv2d")

    def test_forced_model(self) -> None:
        """--model forces a single backend."""
        assert _names(_build("claude", key=True, bedrock=True)) == ["claude"]
        assert _names(_build("bedrock", key=True, bedrock=True)) == ["bedrock"]
        assert _names(_build("lowering", key=True, bedrock=True)) == ["lowering"]

    def test_forced_model_without_credentials_is_refused(self) -> None:
        """Forcing Claude without a key (or Bedrock without AWS) is a clear error."""
        with pytest.raises(RouterError, match="ANTHROPIC_API_KEY"):
            _build("claude", key=False, bedrock=True)
        with pytest.raises(RouterError, match="AWS credentials"):
            _build("bedrock", key=True, bedrock=False)
        with pytest.raises(RouterError, match="unknown model"):
            _build("gpt", key=True, bedrock=True)

    def test_nothing_available(self) -> None:
        """auto with no lowering and no credentials fails with the reason."""
        with pytest.raises(RouterError, match="no model backend available"):
            _build("auto", key=False, bedrock=False, lowering=False)


class TestEscalation:
    def test_lowering_escalates_after_its_one_attempt(self) -> None:
        """The deterministic lowering hands over after one failed turn."""
        router = Router([Named("lowering"), Named("claude")])
        assert router.is_precursor
        assert router.after_turn(verified=False) == "escalate"
        assert router.current.name == "claude" and not router.is_precursor
        assert router.models_used() == "lowering -> claude"

    def test_cheaper_model_escalates_after_two_failures(self) -> None:
        """A non-deterministic cheaper backend gets two failed turns, then escalates."""
        router = Router([Named("cheap"), Named("claude")])
        assert router.after_turn(verified=False) == "continue"
        assert router.after_turn(verified=False) == "escalate"

    def test_decline_escalates_at_once(self) -> None:
        """A decline moves on immediately."""
        router = Router([Named("cheap"), Named("claude")])
        assert router.after_turn(verified=False, declined=True) == "escalate"

    def test_last_model_keeps_going(self) -> None:
        """The last backend continues after failures (the turn budget stops it)."""
        router = Router([Named("claude")])
        for _ in range(5):
            assert router.after_turn(verified=False) == "continue"

    def test_last_model_stops_when_broken_or_deterministic(self) -> None:
        """An API failure of the last backend, or a lone lowering's failure, stops the loop."""
        assert Router([Named("claude")]).after_turn(verified=False, broken=True) == "stop"
        assert Router([Named("lowering")]).after_turn(verified=False) == "stop"


class TestDeclaredCapabilities:
    def test_determinism_is_declared_not_guessed_from_the_name(self) -> None:
        """The router reads `deterministic`, never the name: a deterministic backend of any
        name hands over after one failure, and one called "lowering" that says it is not
        deterministic gets the usual two."""
        router = Router([Named("cheap", deterministic=True), Named("claude")])
        assert router.after_turn(verified=False) == "escalate"
        router = Router([Named("lowering", deterministic=False), Named("claude")])
        assert router.after_turn(verified=False) == "continue"
        assert router.after_turn(verified=False) == "escalate"

    async def test_base_defaults_satisfy_the_protocol(self) -> None:
        """A transport that implements only `name` and `turn` has every capability."""
        backend = Named("plain")
        assert isinstance(backend, ModelBackend)
        assert (backend.label, backend.deterministic, backend.variants_left) == ("plain", False,
                                                                                0)
        assert await backend.preflight(None) is None  # type: ignore[arg-type]
        await Router([backend]).aclose()

    def test_no_capability_is_probed(self) -> None:
        """No caller asks a backend with getattr whether it has a capability."""
        from pathlib import Path

        import nkibot

        root = Path(nkibot.__file__).parent
        probes = ("deterministic", "variants_left", "label", "aclose", "preflight", "platform")
        found = [f"{path.relative_to(root)}: {line.strip()}"
                 for path in root.rglob("*.py")
                 for line in path.read_text("utf-8").splitlines()
                 if "getattr(" in line and any(f'"{p}"' in line for p in probes)]
        assert found == []
