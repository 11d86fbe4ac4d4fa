"""The effect of a `scan` decision: read the code at the SHA, discover, write the dashboard."""

from __future__ import annotations

import anyio

from nkibot.convert.scan import (
    MAX_FILE_BYTES,
    KernelCandidate,
    discover_sources,
    selected,
)
from nkibot.github.dashboard import write_board
from nkibot.github.gateway import GitHubGateway
from nkibot.handlers.dashboard import Board, Row, ScanRequest

#: One blob request per file: bounded so that a scan stays far inside the installation's
#: rate limit (5000 requests an hour).
MAX_SCAN_FILES = 300
#: GitHub caps an issue body at 65536 characters; a row and its state take ~600.
MAX_ROWS = 80


def row_of(c: KernelCandidate) -> Row:
    return Row(target=c.target, kind=c.kind_label, shapes=c.shapes, shapes_from=c.shapes_from,
               lowering=c.lowering, calls=c.calls, op_count=c.op_count,
               no_backend=c.no_backend, reference=c.reference)


async def run_scan(gw: GitHubGateway, repo: str, request: ScanRequest) -> tuple[int, str]:
    """(dashboard issue number, a one-line reply) after scanning `request.sha`."""
    config = request.config

    def wanted(path: str, size: int) -> bool:
        return (size <= MAX_FILE_BYTES and selected(path, config.scan, config.exclude)
                and (not request.globs or selected(path, request.globs)))

    files = await gw.files_at(repo, request.sha, wanted, MAX_SCAN_FILES)
    found = await anyio.to_thread.run_sync(
        lambda: discover_sources(files, config=config, globs=request.globs))
    board = Board(request.ref, request.sha, tuple(row_of(c) for c in found[:MAX_ROWS]))
    number, created = await write_board(gw, repo, board)
    covered = sum(c.lowering for c in found)
    verb = "Created" if created else "Updated"
    limits = []
    if len(files) >= MAX_SCAN_FILES:
        limits.append(f"only the first {MAX_SCAN_FILES} matching files were read")
    if len(found) > MAX_ROWS:
        limits.append(f"the dashboard lists the {MAX_ROWS} most worth converting")
    note = f" Narrow the scan with `/nki scan PATH` or `scan:` globs: {'; '.join(limits)}." \
        if limits else ""
    return number, (f"{verb} the NKI conversion dashboard, #{number}: {len(found)} candidates "
                    f"in {len(files)} files at `{request.sha[:12]}`, {covered} covered by the "
                    f"lowering (0 tokens). Tick a box there to convert a target.{note}")
