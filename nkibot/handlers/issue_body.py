"""Targets named in an issue body: `path::Name` lines, or a fenced yaml block with shapes."""

from __future__ import annotations

import re

import yaml
from pydantic import ValidationError

from nkibot.config.repo import TargetSpec
from nkibot.config.safeyaml import YamlRefused, safe_load
from nkibot.config.targets import MAX_TARGETS, TargetError, validate_target

_FENCE = re.compile(r"^(```|~~~)\s*(ya?ml)\s*$", re.I)
_TARGET_LINE = re.compile(r"^[-*]?\s*`?([^\s`]+\.(?:py|cuh?)::[A-Za-z_][A-Za-z0-9_]*)`?\s*$")


def _yaml_blocks(body: str) -> list[str]:
    blocks: list[str] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i].strip())
        i += 1
        if not match:
            continue
        start = i
        while i < len(lines) and not lines[i].strip().startswith(match.group(1)):
            i += 1
        blocks.append("\n".join(lines[start:i]))
        i += 1
    return blocks


def _from_yaml(block: str) -> list[TargetSpec] | str:
    try:
        data = safe_load(block)
    except YamlRefused as exc:
        return f"the yaml block in the issue is refused: {exc}"
    except yaml.YAMLError:
        return "the yaml block in the issue is not valid YAML"
    items = data.get("targets") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return "the yaml block needs `targets:` with a list of `path::Name` or {target, shapes}"
    try:
        return [TargetSpec.model_validate({"target": v} if isinstance(v, str) else v)
                for v in items[: MAX_TARGETS + 1]]
    except (ValidationError, TargetError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return f"the yaml block in the issue has a bad target: {first}"


def targets_from_issue_body(body: str) -> list[TargetSpec] | str:
    """Targets from the body (yaml block first), or a one-line reason why they are unusable."""
    for block in _yaml_blocks(body):
        found = _from_yaml(block)
        if isinstance(found, str) or found:
            return found[:MAX_TARGETS] if not isinstance(found, str) else found
    specs: list[TargetSpec] = []
    for line in body.splitlines():
        match = _TARGET_LINE.match(line.strip())
        if match:
            try:
                specs.append(TargetSpec(target=validate_target(match.group(1))))
            except (TargetError, ValidationError):
                return f"`{match.group(1)[:100]}` in the issue is not a valid target"
    return specs[:MAX_TARGETS]
