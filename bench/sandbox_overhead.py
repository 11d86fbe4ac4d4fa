"""Per-child cost of the sandbox: bare `python -I -c 'import numpy'`, the old sandbox
(rlimits + `unshare -n`, loaded from a given checkout) and bubblewrap's full isolation,
interleaved so that a busy host slows all three alike. Prints medians in milliseconds.

    python bench/sandbox_overhead.py [/path/to/old/checkout] [rounds] [code]
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nkibot.verify.sandbox import KERNEL, run_sandboxed

ARGV = [sys.executable, "-I", "-c", sys.argv[3] if len(sys.argv) > 3 else "import numpy"]


def _old(checkout: Path) -> Callable[[], object]:
    spec = importlib.util.spec_from_file_location(
        "old_sandbox", checkout / "nkibot" / "verify" / "sandbox.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_sandbox"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return lambda: module.run_sandboxed(ARGV, timeout_s=60)


def main() -> None:
    checkout = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    runs: dict[str, Callable[[], object]] = {
        "bare": lambda: subprocess.run(ARGV, check=True),
        "full (bubblewrap, kernel view)": lambda: run_sandboxed(ARGV, timeout_s=60,
                                                                confinement=KERNEL),
    }
    if checkout is not None:
        runs["old sandbox"] = _old(checkout)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():  # warm caches and the isolation probe
        run()
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    for name, samples in times.items():
        print(f"{name:34s} median {1000 * statistics.median(samples):6.0f} ms "
              f"(n={len(samples)})")


if __name__ == "__main__":
    main()
