"""One snapshot helper for every rendered text (check runs, PR bodies, feedback, transcripts).

A mismatch writes `<name>.new` beside the snapshot, so the difference can be read and, if it
is intended, moved over; `NKIBOT_UPDATE_SNAPSHOTS=1` rewrites snapshots in place.
"""

from __future__ import annotations

import os
from pathlib import Path


def assert_snapshot(folder: Path, name: str, text: str) -> None:
    """`text` equals `folder/name`; a missing or different snapshot fails with a pointer."""
    path = folder / name
    if os.environ.get("NKIBOT_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8") if path.exists() else None
    if expected != text:
        path.with_suffix(path.suffix + ".new").write_text(text, encoding="utf-8")
    assert expected is not None, f"missing snapshot {name}; run with NKIBOT_UPDATE_SNAPSHOTS=1"
    assert expected == text, f"snapshot {name} differs; see {name}.new"
