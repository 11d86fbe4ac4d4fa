"""The `/nki` slash-command grammar, parsed from a comment body without I/O.

    /nki convert [TARGET ...] [--turns N] [--model M] [--backend B] [--atol X] [--rtol Y]
                 [--shape NAME=DIMSxDTYPE ...] [--reference path.py::Module]
    /nki scan [PATH|GLOB ...]
    /nki help | /nki retry | /nki cancel [TARGET ...]

A command counts only on its own line of a top-level paragraph, parsed as CommonMark the
way GitHub renders it: never inside code (fenced with any number of backticks or tildes,
or indented), HTML (comments, `<pre>`), quotes or list items.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

from markdown_it import MarkdownIt

from nkibot.config.targets import (
    MAX_TARGETS,
    ShapeOverride,
    TargetError,
    parse_shape,
    validate_reference,
    validate_target,
)
from nkibot.jobs.model import JobOptions

PREFIX = "/nki"
MAX_COMMAND_CHARS = 2000
MAX_BODY_CHARS = 262_144
_MARKDOWN = MarkdownIt("commonmark")
MAX_TURNS = 50
MAX_SCAN_PATHS = 10
USAGE = (
    "/nki convert [path/to/file.py::Name ...] [--turns N] [--model auto|lowering|claude|bedrock]"
    " [--backend auto|sim|neuron] [--atol X] [--rtol Y] [--shape NAME=DIMSxDTYPE ...]"
    " [--reference path/to/ref.py::Module]\n"
    "/nki scan [path/or/glob ...]\n"
    "/nki help\n/nki retry\n/nki cancel [path/to/file.py::Name ...]"
)
_CHOICES = {
    "model": ("auto", "lowering", "claude", "bedrock"),
    "backend": ("auto", "sim", "neuron"),
}


@dataclass(frozen=True)
class Command:
    verb: Literal["convert", "help", "retry", "cancel", "scan"]
    #: `path::Name` targets; for `scan`, the paths or globs to narrow discovery to.
    targets: tuple[str, ...] = ()
    options: JobOptions = field(default_factory=JobOptions)


@dataclass(frozen=True)
class CommandError:
    """A `/nki` line that does not parse; `reason` is one line for the usage reply."""

    line: str
    reason: str


def command_lines(body: str) -> list[str]:
    """Lines that start with `/nki` in the text GitHub renders as top-level paragraphs.

    The body is parsed as CommonMark (markdown-it), the way GitHub renders it, so a command
    inside a fence of any length (backticks or tildes), an indented code block, an HTML
    block or comment (`<!-- -->`, `<pre>`), a quote or a list item is not one: only a
    paragraph's own lines count."""
    if PREFIX not in body:
        return []
    found: list[str] = []
    tokens = _MARKDOWN.parse(body)
    for before, token in itertools.pairwise(tokens):
        if token.type != "inline" or before.type != "paragraph_open" or before.level != 0:
            continue
        for raw in token.content.splitlines():
            line = raw.strip()
            if line == PREFIX or line.startswith((PREFIX + " ", PREFIX + "\t")):
                found.append(line)
    return found


def parse_comment(body: str) -> Command | CommandError | None:
    """The first command in a comment (later ones are ignored), or None if there is none."""
    if len(body) > MAX_BODY_CHARS and PREFIX in body:
        # GitHub caps a comment at 65,536 characters; a body this long is not one of its
        # comments, and parsing megabytes of Markdown would cost seconds.
        return CommandError(body[:80], f"the comment is longer than {MAX_BODY_CHARS} chars")
    lines = command_lines(body)
    return parse_line(lines[0]) if lines else None


def parse_line(line: str) -> Command | CommandError:
    if len(line) > MAX_COMMAND_CHARS:
        return CommandError(line[:80], f"the command is longer than {MAX_COMMAND_CHARS} chars")
    tokens = line.split()[1:]
    if not tokens or tokens[0] == "help":
        return Command("help") if len(tokens) <= 1 else CommandError(line, "`help` takes no args")
    verb, args = tokens[0], tokens[1:]
    if verb == "retry":
        return Command("retry") if not args else CommandError(line, "`retry` takes no arguments")
    if verb == "scan":
        return _parse_scan(line, args)
    if verb not in ("convert", "cancel"):
        return CommandError(line, f"unknown command `{verb[:40]}`")
    try:
        targets, options = _parse_args(args, allow_options=verb == "convert")
    except TargetError as exc:
        return CommandError(line, str(exc))
    return Command(verb, targets, options)  # type: ignore[arg-type]


def _parse_scan(line: str, args: list[str]) -> Command | CommandError:
    """`/nki scan [PATH|GLOB ...]`: relative paths or globs, no options."""
    if len(args) > MAX_SCAN_PATHS:
        return CommandError(line, f"`scan` takes at most {MAX_SCAN_PATHS} paths")
    for arg in args:
        parts = arg.strip("/").split("/")
        if arg.startswith(("/", "-", "\\")) or ".." in parts or len(arg) > 200:
            return CommandError(line, f"`{arg[:40]}` is not a path or glob inside the repository")
    return Command("scan", tuple(dict.fromkeys(args)))


def _parse_args(args: list[str], allow_options: bool) -> tuple[tuple[str, ...], JobOptions]:
    targets: list[str] = []
    values: dict[str, object] = {}
    shapes: list[ShapeOverride] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            targets.append(validate_target(token))
            continue
        if not allow_options:
            raise TargetError(f"`{token[:40]}` is not allowed here")
        name, eq, inline = token[2:].partition("=")
        if name == "shape":
            start = len(shapes)
            pending = [inline] if eq else []
            while i < len(args) and not args[i].startswith("--") and "=" in args[i]:
                pending.append(args[i])
                i += 1
            shapes.extend(parse_shape(p) for p in pending)
            if len(shapes) == start:
                raise TargetError("`--shape` needs `NAME=DIMSxDTYPE`")
            continue
        if not eq:
            if i >= len(args):
                raise TargetError(f"`--{name[:40]}` needs a value")
            inline, i = args[i], i + 1
        values[name] = _option_value(name, inline)
    if len(targets) > MAX_TARGETS:
        raise TargetError(f"at most {MAX_TARGETS} targets per command")
    return tuple(dict.fromkeys(targets)), JobOptions(shapes=shapes, **values)


def _option_value(name: str, raw: str) -> object:
    if name == "turns":
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_TURNS:
            raise TargetError(f"`--turns` needs an integer from 1 to {MAX_TURNS}")
        return int(raw)
    if name in _CHOICES:
        if raw not in _CHOICES[name]:
            raise TargetError(f"`--{name}` is one of {', '.join(_CHOICES[name])}")
        return raw
    if name == "reference":
        return validate_reference(raw)
    if name in ("atol", "rtol"):
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise TargetError(f"`--{name}` needs a non-negative number")
        return value
    raise TargetError(f"unknown option `--{name[:40]}`")
