"""The conversion dashboard issue's body: render, parse, tick diffs, row updates (pure).

The bot owns only the text between its two markers; whatever a human writes above or
below survives every update. Inside, each candidate is a task-list item (GitHub makes
those clickable; checkboxes in tables are not), and a hidden JSON block holds the rows'
state, so the body is the whole record: no database is needed to know what a row is,
which job it queued, or what its last conversion found. A box is ticked exactly while
its row's job is queued or running; ticking one asks for a conversion, unticking one
cancels it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from nkibot.config.repo import RepoConfig

TITLE = "NKI conversion dashboard"
START = "<!-- nkibot:dashboard:start -->"
END = "<!-- nkibot:dashboard:end -->"
_STATE = re.compile(r"<!-- nkibot:dashboard:state (.*?) -->", re.S)
_ITEM = re.compile(r"^\s*[-*] \[([ xX])\] `([^`]+)`")
ACTIVE = frozenset({"queued", "running"})
INTRO = ("nkibot keeps this issue up to date. Tick a box to convert that target with the "
         "repository's defaults; untick it to cancel. Notes written outside the nkibot "
         "section are kept.")


@dataclass(frozen=True)
class Row:
    """One candidate and the state of its latest conversion."""

    target: str
    kind: str  # "nn.Module", "@triton.jit" or "CUDA"
    shapes: tuple[str, ...] = ()
    shapes_from: str | None = None
    lowering: bool = False
    calls: int = 0
    op_count: int = 0
    no_backend: tuple[str, ...] = ()
    reference: str | None = None
    #: "", "queued", "running", "verified", "failed", "declined", "cancelled", "needs a
    #: reference"...
    status: str = ""
    job_id: str | None = None
    detail: str = ""
    check_run_url: str | None = None
    pr_url: str | None = None
    #: "3.2 µs p50 (Trn1 hardware)" or "1.1 µs (model estimate)"; time_us orders rows.
    time: str | None = None
    time_us: float | None = None

    @property
    def checked(self) -> bool:
        return self.status in ACTIVE


@dataclass(frozen=True)
class RowUpdate:
    """New values for some fields of the row of `target` (None: leave the field alone)."""

    target: str
    status: str | None = None
    job_id: str | None = None
    detail: str | None = None
    check_run_url: str | None = None
    pr_url: str | None = None
    time: str | None = None
    time_us: float | None = None


@dataclass(frozen=True)
class Board:
    """What the bot section holds: the scanned ref and commit, and the rows."""

    ref: str
    sha: str
    rows: tuple[Row, ...] = field(default_factory=tuple)

    def row(self, target: str) -> Row | None:
        return next((r for r in self.rows if r.target == target), None)


def order_key(row: Row) -> tuple[bool, bool, int, int, float, int, str]:
    """Most worth converting first: expressible, lowering-covered, most called, then the
    modelled time of the reference where known (slowest first), else op count."""
    known = row.time_us is not None
    return (bool(row.no_backend), not row.lowering, -row.calls, 0 if known else 1,
            -(row.time_us or 0.0), -row.op_count, row.target)


def _shapes(row: Row) -> str:
    if row.shapes:
        return ", ".join(f"`{s}`" for s in row.shapes)
    return "shapes from get_inputs()" if row.shapes_from else "**needs shapes**"


def _status(row: Row) -> str:
    if not row.status:
        return ""
    bits = [f"**{row.status}**" + (f": {row.detail}" if row.detail else "")]
    bits += [f"[check run]({row.check_run_url})"] if row.check_run_url else []
    bits += [f"[PR]({row.pr_url})"] if row.pr_url else []
    bits += [row.time] if row.time else []
    return " — " + " · ".join(bits)


def render_row(row: Row) -> str:
    mark = "x" if row.checked else " "
    model = "0 tokens (lowering)" if row.lowering else "needs a model"
    parts = [f"`{row.target}`", row.kind, _shapes(row), model]
    if row.calls:
        parts.append(f"called {row.calls}× in forwards")
    if row.reference:
        parts.append(f"reference `{row.reference}`")
    elif row.kind == "CUDA":
        parts.append("**needs a reference** (`references:` in the config)")
    if row.no_backend:
        parts.append("⚠️ no backend can express " + ", ".join(f"`{o}`" for o in row.no_backend))
    return f"- [{mark}] " + " · ".join(parts) + _status(row)


def _state_json(board: Board) -> str:
    data = {"ref": board.ref, "sha": board.sha, "rows": [asdict(r) for r in board.rows]}
    # An HTML comment ends at `-->`; escaping every `-` in JSON strings keeps it intact.
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("-", "\\u002d")


def render_section(board: Board) -> str:
    """The bot's section, markers included, rows in `order_key` order."""
    rows = sorted(board.rows, key=order_key)
    head = (f"### {TITLE}\n\n{INTRO}\n\nScanned `{board.ref}` at `{board.sha[:12]}`: "
            f"{len(rows)} candidate{'s' if len(rows) != 1 else ''}. \"0 tokens\" is a static "
            "estimate that the deterministic lowering covers the target.")
    lines = [render_row(r) for r in rows] or ["_No convertible targets were found._"]
    state = f"<!-- nkibot:dashboard:state {_state_json(replace(board, rows=tuple(rows)))} -->"
    return "\n".join([START, head, "", *lines, "", state, END])


#: The type each hidden-state field must have; anything else reads as the field's default.
_ROW_TYPES: dict[str, type | tuple[type, ...]] = {
    "target": str, "kind": str, "shapes_from": str, "lowering": bool, "calls": int,
    "op_count": int, "reference": str, "status": str, "job_id": str, "detail": str,
    "check_run_url": str, "pr_url": str, "time": str, "time_us": (int, float),
}


def _row(data: dict[str, object]) -> Row:
    """One row of the hidden state, which anyone who can edit the issue can write: a value
    of the wrong type is dropped here, not left to fail later in rendering or ordering."""
    values: dict[str, Any] = {k: v for k, v in data.items()
                              if k in _ROW_TYPES and isinstance(v, _ROW_TYPES[k])
                              and not (k != "lowering" and isinstance(v, bool))}
    for name in ("shapes", "no_backend"):
        raw = data.get(name)
        values[name] = tuple(str(v) for v in raw) if isinstance(raw, list) else ()
    return Row(**values)


def parse_board(body: str) -> Board | None:
    """The board in `body`, or None when it has no intact nkibot section."""
    section = _section(body)
    match = _STATE.search(section) if section is not None else None
    if match is None:
        return None
    try:
        data = json.loads(match.group(1))
        rows = tuple(_row(r) for r in data.get("rows", []))
        return Board(str(data.get("ref", "")), str(data.get("sha", "")), rows)
    except (ValueError, TypeError, AttributeError):
        return None


def _section(body: str) -> str | None:
    start, end = body.find(START), body.find(END)
    return body[start:end + len(END)] if 0 <= start < end else None


def is_dashboard(body: str) -> bool:
    return _section(body) is not None


def checked_targets(body: str) -> set[str]:
    """Targets whose box is ticked inside the bot section of `body`."""
    section = _section(body) or ""
    return {m.group(2) for line in section.splitlines()
            if (m := _ITEM.match(line)) and m.group(1) in "xX"}


def tick_diff(old_body: str, new_body: str) -> tuple[list[str], list[str]]:
    """(ticked, unticked) targets between two versions of the body, board rows only."""
    board = parse_board(new_body) or parse_board(old_body)
    if board is None:
        return [], []
    known = {r.target for r in board.rows}
    old, new = checked_targets(old_body) & known, checked_targets(new_body) & known
    return sorted(new - old), sorted(old - new)


def splice(body: str, section: str) -> str:
    """`body` with its bot section replaced by `section` (appended when it has none)."""
    start, end = body.find(START), body.find(END)
    if 0 <= start < end:
        return body[:start] + section + body[end + len(END):]
    return (body.rstrip() + "\n\n" if body.strip() else "") + section + "\n"


def merge_scan(old: Board | None, new: Board) -> Board:
    """A new scan's rows, keeping each surviving target's conversion state."""
    if old is None:
        return new
    keep = ("status", "job_id", "detail", "check_run_url", "pr_url", "time", "time_us")
    rows = []
    for row in new.rows:
        before = old.row(row.target)
        rows.append(replace(row, **{k: getattr(before, k) for k in keep}) if before else row)
    return replace(new, rows=tuple(rows))


def apply_updates(body: str, updates: tuple[RowUpdate, ...]) -> str:
    """`body` with row updates applied and the section re-rendered (ticks reset to state)."""
    board = parse_board(body)
    if board is None:
        return body
    by_target = {u.target: u for u in updates}
    rows = []
    for row in board.rows:
        update = by_target.get(row.target)
        if update is not None:
            changes = {f.name: getattr(update, f.name) for f in fields(RowUpdate)
                       if f.name != "target" and getattr(update, f.name) is not None}
            row = replace(row, **changes)
        rows.append(row)
    return splice(body, render_section(replace(board, rows=tuple(rows))))


def new_issue_body(board: Board) -> str:
    return ("_Notes above or below the nkibot section are yours: updates keep them._\n\n"
            + render_section(board) + "\n")


@dataclass(frozen=True)
class ScanRequest:
    """Discover at `sha` (of `ref`) and create or update the repository's dashboard."""

    sha: str
    ref: str
    #: Narrowing paths or globs from `/nki scan PATH`; empty: the config's `scan:`.
    globs: tuple[str, ...] = ()
    #: The issue or PR to answer on with a link to the dashboard (None: no reply).
    reply_to: int | None = None
    #: The repository's config (`scan`, `exclude`, `references`, target shapes).
    config: RepoConfig = field(default_factory=RepoConfig)


@dataclass(frozen=True)
class DashboardChange:
    """Re-render the dashboard issue's section with these row updates applied.

    With no updates it restores the boxes to the rows' state (a refused tick)."""

    issue_number: int
    updates: tuple[RowUpdate, ...] = ()
