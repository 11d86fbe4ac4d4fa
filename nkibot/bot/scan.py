"""The effect of a `scan` decision: read the code at the SHA, discover, write the dashboard."""

from __future__ import annotations

import anyio

from nkibot.convert.scan import (
    MAX_FILE_BYTES,
    MAX_FILES,
    KernelCandidate,
    discover_sources,
    selected,
)
from nkibot.github.dashboard import write_board
from nkibot.github.gateway import GitHubGateway
from nkibot.handlers.dashboard import Board, Row, ScanRequest


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

    files = await gw.files_at(repo, request.sha, wanted, MAX_FILES)
    found = await anyio.to_thread.run_sync(
        lambda: discover_sources(files, config=config, globs=request.globs))
    board = Board(request.ref, request.sha, tuple(row_of(c) for c in found))
    number, created = await write_board(gw, repo, board)
    covered = sum(c.lowering for c in found)
    verb = "Created" if created else "Updated"
    return number, (f"{verb} the NKI conversion dashboard, #{number}: {len(found)} candidates "
                    f"in {len(files)} files at `{request.sha[:12]}`, {covered} covered by the "
                    "lowering (0 tokens). Tick a box there to convert a target.")
