"""Run every KernelBench-format file in a folder through `nkibot convert` and tabulate.

    python bench/convert_suite.py bench/tasks [--model lowering] [--backend sim]
                                  [--entry Model] [--match PATTERN] [--json OUT.json]
                                  [--max-input-elements 4194304]

Each file is loaded with `nkibot.convert.taskload.load_task` (shapes from its
`get_inputs()`, constructor arguments from `get_init_inputs()`) and converted with
`nkibot.convert.pipeline.convert`. A file's category is its `# category: X` comment near
the top, else its sub-folder's name (so a KernelBench checkout groups by level). Prints
one line per task as it finishes, then per category: verified / declined / failed, mean
seconds per task, and tokens used. A crash on one task is recorded as a failure and the
suite goes on.

`--estimate` lowers each task and times the kernel with the cost model on zero inputs
(no verification, seconds per task): the roofline fractions of what the lowering emits.

`--max-input-elements N` (with `--count-weights`, the model's weights together count as
one more input: level 3) converts a shrunk copy of each file (`bench/shrink.py`: its
top-level size constants halved until every input has at most N elements; the file
itself is untouched); a task that cannot shrink that far is reported as `too_big` and
left out of the coverage columns. For every verified kernel the suite also reports the
simulator's DMA bytes against the operator's minimum (each input, parameter and output
moved once): a traffic ratio of 1.0 is ideal (simulator counts, not a latency figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/shrink.py, run as a script
import shrink
from shrink import meta_task, minimum_bytes, operator_flops, shrink_source

#: torch.fx tracing keeps process-global state: in-process lowerings run one at a time.
LOWERING = threading.Lock()
CATEGORY = re.compile(r"^#\s*category:\s*(\S+)", re.MULTILINE)


@dataclass
class Outcome:
    path: str
    category: str
    status: str  # verified | declined | failed (plus compiled / cancelled from the pipeline)
    seconds: float
    tokens: int
    reason: str
    dma_bytes: int = 0
    min_bytes: int = 0
    shrunk: str = ""
    lower_s: float = 0.0  # the lowering's own decision time (trace + plan + emit)
    roofline: float | None = None  # cost model (nkibot.sim.cost) estimate, trn1

    @property
    def traffic(self) -> float | None:
        """DMA bytes over the minimum (1.0 = every byte moved once), when measured."""
        return self.dma_bytes / self.min_bytes if self.dma_bytes and self.min_bytes else None


# KernelBench names say what a task computes: the first pattern that matches is its category.
NAME_CATEGORIES = (
    ("conv_transposed", r"conv_transpose"), ("conv", r"conv"), ("pooling", r"pool"),
    ("scan", r"cum"), ("argreduce", r"arg(max|min)"), ("attention", r"attention"),
    ("loss", r"loss"), ("norm", r"norm"),
    ("reduction", r"reduction"), ("matmul", r"mat(mul|rix)|tensor_matrix|gemm"),
    ("activation", r"relu|sigmoid|tanh|softmax|swish|gelu|selu|softplus|softsign|elu"),
)


def category_of(path: Path, root: Path) -> str:
    """`# category: X` near the top, else from a KernelBench-style name, else the sub-folder."""
    head = "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[:5])
    found = CATEGORY.search(head)
    if found:
        return found.group(1)
    for name, pattern in NAME_CATEGORIES:
        if re.search(pattern, path.stem, re.IGNORECASE):
            return name
    parent = path.parent.relative_to(root)
    return str(parent) if str(parent) != "." else "uncategorised"


def task_files(root: Path, entry: str, match: str | None) -> list[Path]:
    """Python files under root defining `class <entry>`, optionally filtered by a regex."""
    files = sorted(p for p in root.rglob("*.py") if not p.name.startswith("_"))
    files = [p for p in files
             if f"class {entry}" in p.read_text(encoding="utf-8", errors="replace")]
    return [p for p in files if match is None or re.search(match, str(p))]


def _shrunk_copy(path: Path, scratch: Path, max_elements: int | None
                 ) -> tuple[Path, str, bool, int]:
    """(file to load, what was shrunk, fits, minimum bytes) for one task file."""
    source = path.read_text(encoding="utf-8", errors="replace")
    note, fits = "", True
    if max_elements is not None:
        shrunk = shrink_source(source, max_elements)
        note = ", ".join(f"{k}={old}->{new}" for k, (old, new) in shrunk.changed.items())
        fits, source = shrunk.fits, shrunk.source
        path = scratch / path.name
        path.write_text(source, encoding="utf-8")
    try:
        least = minimum_bytes(source)
    except Exception:
        least = 0
    return path, note, fits, least


def lower_only(path: Path, root: Path, entry: str, max_elements: int | None) -> Outcome:
    """The lowering's decision alone (lowered / declined, and its time): no verification."""
    return _lower(path, root, entry, max_elements)[0]


def _lower(path: Path, root: Path, entry: str, max_elements: int | None
           ) -> tuple[Outcome, tuple[str, Any, Any] | None]:
    """The lowering's decision as an Outcome, and for a kernel (source, task, Lowered)."""
    from nkibot.lowering import Declined, lower_task

    category = category_of(path, root)
    started = time.monotonic()
    source = path.read_text(encoding="utf-8", errors="replace")
    note, fits = "", True
    try:
        if max_elements is not None:
            shrunk = shrink_source(source, max_elements)
            note = ", ".join(f"{k}={a}->{b}" for k, (a, b) in shrunk.changed.items())
            source, fits = shrunk.source, shrunk.fits
        if not fits:
            return Outcome(str(path), category, "too_big", 0.0, 0, "inputs stay too big"), None
        task = meta_task(source, str(path), entry)
        decided = time.monotonic()
        result = lower_task(task)
    except Exception as exc:  # the suite reports crashes, it does not stop on them
        return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                       f"crash: {type(exc).__name__}: {exc}", shrunk=note), None
    lower_s = time.monotonic() - decided
    if isinstance(result, Declined):
        return Outcome(str(path), category, "declined", time.monotonic() - started, 0,
                       f"the lowering declined: {result.reason}"[:200], shrunk=note,
                       lower_s=lower_s), None
    return Outcome(str(path), category, "lowered", time.monotonic() - started, 0,
                   f"{len(result.source.splitlines())} lines", shrunk=note,
                   lower_s=lower_s), (source, task, result)


KERNEL_DTYPES = {"int64": "int32", "float64": "float32"}  # NKI's calling convention


def estimate_only(path: Path, root: Path, entry: str, max_elements: int | None,
                  target: str = "trn1") -> Outcome:
    """The lowering's kernel timed by the cost model on zero inputs: no verification.

    A quick look at roofline fractions (seconds per task, matmul arithmetic skipped);
    the figures are the same model estimates a verified run reports, but the kernel's
    numbers are not checked, so a row here is `lowered`, never `verified`.
    """
    import types

    from nkibot.sim import activate
    from nkibot.sim.cost import estimate
    from nkibot.sim.cost.quick import operator_roofline

    outcome, kernel = _lower(path, root, entry, max_elements)
    if kernel is None:
        return outcome
    source, task, lowered = kernel
    started = time.monotonic()
    try:
        module = types.ModuleType("lowered_kernel")
        with activate(force=True, target=target):
            exec(compile(lowered.source, "lowered_kernel.py", "exec"), module.__dict__)
        shapes = [(tuple(spec.shape), KERNEL_DTYPES.get(spec.dtype, spec.dtype))
                  for spec in [*task.inputs, *task.state_dict] if spec.value is None]
        report = estimate(module.__dict__[lowered.function], *shapes, target=target)
        low = any(spec.dtype in ("bfloat16", "float16") for spec in task.inputs)
        model = operator_roofline(report.as_dict(), operator_flops(source, entry), low)
    except Exception as exc:  # the suite reports crashes, it does not stop on them
        return Outcome(outcome.path, outcome.category, "failed",
                       outcome.seconds + time.monotonic() - started, 0,
                       f"estimate crashed: {type(exc).__name__}: {exc}"[:200],
                       shrunk=outcome.shrunk, lower_s=outcome.lower_s)
    return Outcome(outcome.path, outcome.category, "lowered",
                   outcome.seconds + time.monotonic() - started, 0,
                   f"model estimate ({target}), not verified: {report.makespan_us:.1f} us, "
                   f"bottleneck {report.critical_engine}", report.dma_bytes,
                   minimum_bytes(source), outcome.shrunk, outcome.lower_s,
                   float(model["roofline_fraction"]))


async def convert_one(path: Path, root: Path, entry: str, model: str, backend: str,
                      max_elements: int | None = None) -> Outcome:
    from nkibot.config.settings import Settings
    from nkibot.convert.pipeline import ConvertOptions, convert
    from nkibot.convert.taskload import TaskLoadError, load_task
    from nkibot.verify import zygote
    from nkibot.verify.reference import reference_folders

    category = category_of(path, root)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nkibot-suite-") as scratch:
        try:
            load_path, note, fits, least = _shrunk_copy(path, Path(scratch), max_elements)
        except Exception as exc:
            return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                           f"could not shrink: {type(exc).__name__}: {exc}")
        if not fits:
            return Outcome(str(path), category, "too_big", time.monotonic() - started, 0,
                           f"inputs stay over {max_elements} elements ({note})", shrunk=note)
        try:
            settings = Settings()
            # As `nkibot convert` does: the torch children fork from one warm sandbox.
            with zygote.session(reference_folders(load_path), enabled=settings.warm_sandbox):
                task = await asyncio.to_thread(load_task, load_path, entry,
                                               display_path=str(path))
                decided = time.monotonic()
                declined = await asyncio.to_thread(_lowering_declines, task) if (
                    model == "lowering") else None
                lower_s = time.monotonic() - decided
                if declined is not None:
                    return Outcome(str(path), category, "declined",
                                   time.monotonic() - started, 0, declined[:200], shrunk=note,
                                   lower_s=lower_s)
                result = await convert(task, settings=settings,
                                       options=ConvertOptions(model=model, backend=backend))
        except TaskLoadError as exc:
            return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                           f"could not load: {exc}", shrunk=note)
        except Exception as exc:  # the suite reports crashes, it does not stop on them
            return Outcome(str(path), category, "failed", time.monotonic() - started, 0,
                           f"crash: {type(exc).__name__}: {exc}", shrunk=note)
    reason = "; ".join(result.reasons)[:200]
    stats = result.profile.sim_stats if result.profile is not None else {}
    dma = stats.get("dma_bytes", 0)
    modelled = result.profile.model if result.profile is not None else {}
    fraction = modelled.get("roofline_fraction")
    return Outcome(str(path), category, result.status, time.monotonic() - started,
                   result.tokens.total, reason, int(dma) if isinstance(dma, int) else 0,
                   least, note, lower_s,
                   float(fraction) if isinstance(fraction, int | float) else None)


def _lowering_declines(task: object) -> str | None:
    """The lowering's decline reason, decided before the reference runs (None: it lowers).

    Runs the lowering in this process (it executes the task file, as the shrinking does):
    a decline costs no reference run and its time is the lowering's alone.
    """
    from nkibot.lowering import Declined, lower_task

    with LOWERING:
        result = lower_task(task)  # type: ignore[arg-type]
    return f"the lowering declined: {result.reason}" if isinstance(result, Declined) else None


def table(outcomes: list[Outcome]) -> str:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.category].append(o)
    head = (f"| {'category':<14} | tasks | verified | lowered (unverified) | declined | "
            "failed | too big | "
            "mean s/task | slowest decline s | tokens |")
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for name in [*sorted(groups), "all"]:
        rows = outcomes if name == "all" else groups[name]
        count = {s: sum(1 for o in rows if o.status == s)
                 for s in ("verified", "declined", "too_big", "lowered")}
        failed = len(rows) - sum(count.values())
        mean = sum(o.seconds for o in rows) / max(len(rows), 1)
        declines = [o.lower_s for o in rows if o.status == "declined"]
        slowest = f"{max(declines):.2f}" if declines else "-"
        tokens = sum(o.tokens for o in rows)
        lines.append(f"| {name:<14} | {len(rows):>5} | {count['verified']:>8} | "
                     f"{count['lowered']:>20} | {count['declined']:>8} | {failed:>6} | "
                     f"{count['too_big']:>7} | "
                     f"{mean:>11.1f} | {slowest:>17} | {tokens:>6} |")
    return "\n".join(lines)


def roofline_summary(outcomes: list[Outcome]) -> str:
    """Roofline fractions of the verified kernels (cost model estimate, not a measurement)."""
    kind = "verified" if any(o.status == "verified" for o in outcomes) else "lowered"
    values = sorted(o.roofline for o in outcomes if o.status == kind
                    and o.roofline is not None)
    if not values:
        return "roofline fraction: no verified kernel carries a cost-model estimate"
    mid = statistics.median(values)  # the mean of the middle two for an even count
    return (f"roofline fraction (model estimate, trn1, not a measurement) over {len(values)} "
            f"{kind}: min {values[0]:.3f}  median {mid:.3f}  max {values[-1]:.3f}; "
            f">=0.5: {sum(1 for v in values if v >= 0.5)}, <0.1: "
            f"{sum(1 for v in values if v < 0.1)}")


def traffic_summary(outcomes: list[Outcome]) -> str:
    """Distribution of DMA bytes / minimum over the verified kernels (simulator counts)."""
    ratios = sorted(r for o in outcomes if o.status == "verified"
                    for r in [o.traffic] if r is not None)
    if not ratios:
        return "traffic (DMA bytes / minimum): no verified kernel with simulator counts"
    def q(f: float) -> float:
        return ratios[min(len(ratios) - 1, int(f * len(ratios)))]
    worst = max((o for o in outcomes if o.traffic is not None and o.status == "verified"),
                key=lambda o: o.traffic or 0.0)
    return (f"traffic (DMA bytes / minimum, simulator counts) over {len(ratios)} verified: "
            f"min {ratios[0]:.2f}  p25 {q(0.25):.2f}  median {q(0.5):.2f}  p75 {q(0.75):.2f}  "
            f"max {ratios[-1]:.2f} ({Path(worst.path).name}); "
            f"<=1.5x: {sum(1 for r in ratios if r <= 1.5)}, >4x: {sum(1 for r in ratios if r > 4)}")


async def run(args: argparse.Namespace) -> list[Outcome]:
    """Every task, `args.jobs` at a time; rows print (and the JSON grows) as tasks finish."""
    root = Path(args.dir)
    outcomes: list[Outcome] = []
    slots = asyncio.Semaphore(max(1, args.jobs))

    async def one(path: Path) -> None:
        async with slots:
            if args.estimate:
                outcome = estimate_only(path, root, args.entry, args.max_input_elements)
            elif args.lower_only:
                outcome = lower_only(path, root, args.entry, args.max_input_elements)
            else:
                outcome = await convert_one(path, root, args.entry, args.model, args.backend,
                                            args.max_input_elements)
        outcomes.append(outcome)
        print(_line(outcome, root), flush=True)
        if args.json:  # written as it goes: an interrupted run keeps what it measured
            Path(args.json).write_text(json.dumps([_row(o) for o in outcomes], indent=2))

    await asyncio.gather(*(one(p) for p in task_files(root, args.entry, args.match)))
    return sorted(outcomes, key=lambda o: o.path)


def _line(outcome: Outcome, root: Path) -> str:
    note = f"  ({outcome.reason})" if outcome.status != "verified" and outcome.reason else ""
    ratio = f"  traffic {outcome.traffic:.2f}x" if outcome.traffic else ""
    if outcome.roofline is not None:
        ratio += f"  roofline {outcome.roofline:.3f} (model)"
    if outcome.status == "declined":
        ratio = f"  (lowering {outcome.lower_s:.2f}s)"
    return (f"{outcome.status:<9} {outcome.seconds:6.1f}s  {outcome.category:<14} "
            f"{Path(outcome.path).relative_to(root)}{ratio}{note}")


def _row(o: Outcome) -> dict[str, object]:
    return {**asdict(o), "traffic": o.traffic}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="folder of KernelBench-format .py files (searched recursively)")
    parser.add_argument("--model", default="lowering", help="auto | lowering | claude | bedrock")
    parser.add_argument("--backend", default="sim", help="auto | sim | neuron")
    parser.add_argument("--entry", default="Model", help="class to convert in each file")
    parser.add_argument("--match", default=None, help="only paths matching this regex")
    parser.add_argument("--json", default=None, help="also write per-task outcomes here")
    parser.add_argument("--lower-only", action="store_true",
                        help="only the lowering's decision (lowered/declined), no verification")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="convert N tasks at a time (each task's children are processes; "
                             "per-task seconds then include waiting for a core)")
    parser.add_argument("--estimate", action="store_true",
                        help="lower and time each kernel with the cost model on zero inputs "
                             "(trn1 model estimate, roofline fraction), no verification")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                        help="print the table of earlier --json files (later ones win)")
    parser.add_argument("--count-weights", action="store_true",
                        help="with --max-input-elements: the model's weights, all together, "
                             "must fit N elements too (KernelBench level 3 networks)")
    parser.add_argument("--max-input-elements", type=int, default=None, metavar="N",
                        help="convert a copy with size constants halved until every input "
                             "has at most N elements (e.g. 4194304 for the simulator)")
    args = parser.parse_args(argv)
    shrink.COUNT_WEIGHTS, shrink.ENTRY = args.count_weights, args.entry
    if not Path(args.dir).is_dir():
        parser.error(f"{args.dir} is not a folder")
    if args.merge:
        merged: dict[str, Outcome] = {}
        for name in args.merge:
            for row in json.loads(Path(name).read_text()):
                row.pop("traffic", None)
                merged[row["path"]] = Outcome(**row)
        print(table(list(merged.values())))
        print(traffic_summary(list(merged.values())))
        print(roofline_summary(list(merged.values())))
        return 0
    started = time.monotonic()
    outcomes = asyncio.run(run(args))
    print()
    print(f"model={args.model} backend={args.backend} tasks={len(outcomes)} "
          f"wall={time.monotonic() - started:.0f}s")
    print(table(outcomes))
    print(traffic_summary(outcomes))
    print(roofline_summary(outcomes))
    if args.json:
        Path(args.json).write_text(json.dumps([_row(o) for o in outcomes], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
