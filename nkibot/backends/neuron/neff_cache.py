"""A file cache of compiled kernels (NEFF plus the compile result), keyed by what decides them.

The key is the SHA-256 of the kernel source, the input specs (name, shape, dtype, in
order), the compile target and the installed SDK versions. The agent loop often
compiles the same code twice (compile_kernel, then verify_kernel), and a re-profile
of an unchanged kernel needs no compile at all; a new SDK version invalidates every
entry because the compiler itself changed.

Layout: `<root>/<key[:2]>/<key>/{result.json,kernel.neff}`. Entries are written into a
temporary directory and renamed into place, so a reader never sees half an entry and
concurrent workers compiling the same kernel both succeed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from nkibot.results import CompileResult
from nkibot.task import InputSpec

RESULT_FILE = "result.json"
NEFF_FILE = "kernel.neff"


def cache_key(
    src: str,
    inputs: Sequence[InputSpec],
    sdk: Mapping[str, str | None],
    target: str = "trn1",
) -> str:
    """Deterministic hex digest of everything that changes the compiled kernel."""
    payload = {
        "src": src,
        "inputs": [[spec.name, list(spec.shape), spec.dtype] for spec in inputs],
        "sdk": {name: sdk[name] for name in sorted(sdk)},
        "target": target,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nkibot" / "neff"


class NeffCache:
    """Compiled kernels on disk; only successful compiles are stored."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def entry_dir(self, key: str) -> Path:
        if len(key) < 8 or not all(ch in "0123456789abcdef" for ch in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / key

    def get(self, key: str) -> tuple[CompileResult, Path | None] | None:
        """The stored result and its NEFF (None when the compile kept no NEFF), or a miss."""
        entry = self.entry_dir(key)
        try:
            result = CompileResult.model_validate_json((entry / RESULT_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        neff = entry / NEFF_FILE
        return result, (neff if neff.exists() else None)

    def put(self, key: str, result: CompileResult, neff: Path | None = None) -> Path:
        """Store a successful compile; returns the entry directory."""
        if not result.ok:
            raise ValueError("only successful compiles are cached")
        entry = self.entry_dir(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        try:
            (staging / RESULT_FILE).write_text(result.model_dump_json(), "utf-8")
            if neff is not None and neff.exists():
                shutil.copyfile(neff, staging / NEFF_FILE)
            try:
                staging.replace(entry)
            except OSError:
                # Another worker stored the same key first; both entries are equivalent.
                if not (entry / RESULT_FILE).exists():
                    raise
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(staging)
        return entry
