"""Run every KernelBench-format file in a folder through `nkibot convert` and tabulate.

    python bench/convert_suite.py bench/tasks [--model lowering] [--backend sim]
                                  [--entry Model] [--match PATTERN] [--json OUT.json]

Each file is loaded with `nkibot.convert.taskload.load_task` (shapes from its
`get_inputs()`, constructor arguments from `get_init_inputs()`) and converted with
`nkibot.convert.pipeline.convert`. A file's category is its `# category: X` comment near
the top, else its sub-folder's name (so a KernelBench checkout groups by level). Prints
one line per task as it finishes, then per category: verified / declined / failed, mean
seconds per task, and tokens used. A crash on one task is recorded as a failure and the
suite goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

CATEGORY = re.compile(r"^#\s*category:\s*(\S+)", re.MULTILINE)


@dataclass
class Outcome:
    path: str
    category: str
    status: str  # verified | declined | failed (plus compiled / cancelled from the pipeline)
    seconds: float
    tokens: int
    reason: str


def category_of(path: Path, root: Path) -> str:
    head = "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[:5])
    found = CATEGORY.search(head)
    if found:
        return found.group(1)
    parent = path.parent.relative_to(root)
    return str(parent) if str(parent) != "." else "uncategorised"


def task_files(root: Path, entry: str, match: str | None) -> list[Path]:
    """Python files under root defining `class <entry>`, optionally filtered by a regex."""
    files = sorted(p for p in root.rglob("*.py") if not p.name.startswith("_"))
    files = [p for p in files
             if f"class {entry}" in p.read_text(encoding="utf-8", errors="replace")]
    return [p for p in files if match is None or re.search(match, str(p))]


async def convert_one(path: Path, root: Path, entry: str, model: str, backend: str) -> Outcome:
    from nkibot.config.settings import Settings
    from nkibot.convert.pipeline import convert
    from nkibot.convert.taskload import TaskLoadError, load_task

    category = category_of(path, root)
    started = time.monotonic()
    try:
        task = await asyncio.to_thread(load_task, path, entry)
        result = await convert(task, settings=Settings(), model=model, backend=backend)
    except TaskLoadError as exc:
        return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                       f"could not load: {exc}")
    except Exception as exc:  # the suite reports crashes, it does not stop on them
        return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                       f"crash: {type(exc).__name__}: {exc}")
    reason = "; ".join(result.reasons)[:160]
    return Outcome(str(path), category, result.status, time.monotonic() - started,
                   result.tokens.total, reason)


def table(outcomes: list[Outcome]) -> str:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.category].append(o)
    head = (f"| {'category':<14} | tasks | verified | declined | failed | mean s/task | "
            "tokens |")
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for name in [*sorted(groups), "all"]:
        rows = outcomes if name == "all" else groups[name]
        count = {s: sum(1 for o in rows if o.status == s) for s in ("verified", "declined")}
        failed = len(rows) - count["verified"] - count["declined"]
        mean = sum(o.seconds for o in rows) / max(len(rows), 1)
        tokens = sum(o.tokens for o in rows)
        lines.append(f"| {name:<14} | {len(rows):>5} | {count['verified']:>8} | "
                     f"{count['declined']:>8} | {failed:>6} | {mean:>11.1f} | {tokens:>6} |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> list[Outcome]:
    root = Path(args.dir)
    outcomes = []
    for path in task_files(root, args.entry, args.match):
        outcome = await convert_one(path, root, args.entry, args.model, args.backend)
        outcomes.append(outcome)
        note = f"  ({outcome.reason})" if outcome.status != "verified" and outcome.reason else ""
        print(f"{outcome.status:<9} {outcome.seconds:6.1f}s  {outcome.category:<14} "
              f"{path.relative_to(root)}{note}", flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="folder of KernelBench-format .py files (searched recursively)")
    parser.add_argument("--model", default="lowering", help="auto | lowering | claude | bedrock")
    parser.add_argument("--backend", default="sim", help="auto | sim | neuron")
    parser.add_argument("--entry", default="Model", help="class to convert in each file")
    parser.add_argument("--match", default=None, help="only paths matching this regex")
    parser.add_argument("--json", default=None, help="also write per-task outcomes here")
    args = parser.parse_args(argv)
    if not Path(args.dir).is_dir():
        parser.error(f"{args.dir} is not a folder")
    started = time.monotonic()
    outcomes = asyncio.run(run(args))
    print()
    print(f"model={args.model} backend={args.backend} tasks={len(outcomes)} "
          f"wall={time.monotonic() - started:.0f}s")
    print(table(outcomes))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
