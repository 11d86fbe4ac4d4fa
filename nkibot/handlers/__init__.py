"""Pure decisions: an event plus gathered facts becomes a Decision (no I/O here)."""

from nkibot.config.targets import TargetError, parse_shape, validate_target
from nkibot.handlers.commands import Command, CommandError, parse_comment
from nkibot.handlers.decide import Needs, decide, screen
from nkibot.handlers.decision import Decision, Facts, Policy, ignore, owns
from nkibot.handlers.events import Incoming
from nkibot.handlers.intake import read_event

__all__ = [
    "Command",
    "CommandError",
    "Decision",
    "Facts",
    "Incoming",
    "Needs",
    "Policy",
    "TargetError",
    "decide",
    "ignore",
    "owns",
    "parse_comment",
    "parse_shape",
    "read_event",
    "screen",
    "validate_target",
]
