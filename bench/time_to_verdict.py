"""Where a conversion's wall time goes: `nkibot convert` per stage, on a fixed set.

    python bench/time_to_verdict.py [--case NAME ...] [--max-input-elements 4194304]
                                    [--profile DIR] [--json OUT.json] [--kb /work/kb]
                                    [--modes warm,cold]

Each case runs `nkibot convert FILE::Name` with the default settings (model auto, backend
auto, 3 optimize turns) in a fresh Python process, exactly as a user types it, and the
process reports a timestamp for every event:
- start-up: from spawning the process to the pipeline's first stage (interpreter, imports,
  task load, sandbox set-up);
- each pipeline stage (backend, reference, loop, profile) and, inside them, every
  sandboxed child: the lowering child, the reference child, compile (trace) children,
  verification children (two per verification: the determinism pair), profile children;
- report: writing the outputs and the summary, to the process's exit.

`--modes warm,cold` runs every case both ways, side by side in one run: `warm` (the
default settings: the torch children fork from the conversion's warm sandbox,
`nkibot.verify.zygote`) and `cold` (`NKIBOT_WARM_SANDBOX=0`: each child starts a cold
interpreter, as before). A child's time is its wall time either way; a warm child's
includes waiting for the warm sandbox to finish importing torch.

The cases: the README example; level 1's Swish 25 (the third of the level-1 sample: one
elementwise op on 4M elements, so what it takes is the fixed cost and the exchange files);
level 1's 3-D conv, its depthwise conv 85 and its
grouped, strided, dilated transposed conv 75 (the sixth and tenth of the every-tenth-task
level-1 sample, which set its median and maximum); level 2's GEMM chain 12 and conv chain
4; level 3's MLP. Without `--case`, all of them.

KernelBench cases are converted from a shrunk copy (`bench/shrink.py`, as
`bench/convert_suite.py --max-input-elements` does); the copy is made by this parent, so
the shrinking's own torch import is not in the figures. Every time is wall-clock on this
host, measured by this bench; nothing here is a kernel latency.

`--profile DIR` runs each case's process under cProfile (DIR/CASE.parent.prof) and replays
the first kernel child of each kind in-process under cProfile after its sandboxed run
(DIR/CASE.KIND.prof; our own kernels, no sandbox needed for a trusted task), then prints
the top functions by cumulative and own time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KB = Path("/work/kb")  # holds level1, level2, level3 on the project's shared host
#: name -> (file relative to the KernelBench root, or to the repo for "repo:", entry point)
CASES: dict[str, tuple[str, str]] = {
    "readme-rmsnorm": ("repo:examples/rmsnorm.py", "RMSNorm"),
    "l1-swish": ("level1/25_Swish.py", "Model"),
    "l1-conv3d": ("level1/54_conv_standard_3D__square_input__square_kernel.py", "Model"),
    "l2-gemm-chain": ("level2/12_Gemm_Multiply_LeakyReLU.py", "Model"),
    "l2-conv-chain": ("level2/4_Conv2d_Mish_Mish.py", "Model"),
    "l3-mlp": ("level3/1_MLP.py", "Model"),
    "l1-depthwise": ("level1/85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel.py", "Model"),
    "l1-convt-grouped": ("level1/75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_"
                         "strided__grouped____padded____dilated__.py", "Model"),
}


def _source_file(case: str, kb: Path, scratch: Path, max_elements: int | None) -> Path:
    rel, _ = CASES[case]
    if rel.startswith("repo:"):
        return REPO / rel.removeprefix("repo:")
    path = kb / rel
    if max_elements is None:
        return path
    sys.path.insert(0, str(HERE))
    from shrink import shrink_source

    shrunk = shrink_source(path.read_text(encoding="utf-8"), max_elements)
    out = scratch / path.name
    out.write_text(shrunk.source, encoding="utf-8")
    return out


# ---- the child: one `nkibot convert`, instrumented --------------------------------------

def _child_kind(command: list[str], stdin: bytes) -> str:
    if any("nkibot.lowering" in a for a in command):
        return "lowering child"
    try:
        request = json.loads(stdin or b"{}")
    except ValueError:
        return "other child"
    op = request.get("op") if isinstance(request, dict) else None
    if op != "run_kernel":
        return f"{op} child"
    if "cost_model" in request:
        return "cost child" if request.get("cost_only") else "profile child"
    return "compile child" if "random" in request else "verify child"


def _instrument(events: list[dict[str, Any]], profile_dir: Path | None, case: str) -> None:
    """Record stages and sandboxed children as (what, start, end) wall-clock events."""
    from nkibot.convert import cli
    from nkibot.verify import sandbox

    run_child, replayed = sandbox._run, set()

    def timed_run(command: list[str], stdin: bytes, *args: Any, **kw: Any) -> Any:
        began = time.time()
        try:
            return run_child(command, stdin, *args, **kw)
        finally:
            kind = _child_kind(command, stdin)
            events.append({"what": kind, "start": began, "end": time.time()})
            if profile_dir is not None and kind not in replayed and stdin[:1] == b"{":
                replayed.add(kind)
                _replay(json.loads(stdin), profile_dir / f"{case}.{kind.split()[0]}.prof")

    sandbox._run = timed_run  # type: ignore[assignment]
    from nkibot.verify import zygote

    run_warm = zygote.Zygote.run

    def timed_warm(self: Any, argv: list[str], stdin: bytes, **kw: Any) -> Any:
        began = time.time()
        try:
            return run_warm(self, argv, stdin, **kw)
        finally:
            events.append({"what": _child_kind(list(argv), stdin), "start": began,
                           "end": time.time()})

    zygote.Zygote.run = timed_warm  # type: ignore[method-assign]
    on_stage = cli.Progress.on_stage

    def stage(self: Any, name: str) -> None:
        events.append({"what": f"stage {name}", "start": time.time(), "end": None})
        on_stage(self, name)

    cli.Progress.on_stage = stage  # type: ignore[method-assign]
    from nkibot.convert import pipeline

    convert = pipeline.convert

    async def timed_convert(*args: Any, **kw: Any) -> Any:
        try:
            return await convert(*args, **kw)
        finally:
            events.append({"what": "pipeline returned", "start": time.time(), "end": None})

    pipeline.convert = timed_convert  # type: ignore[assignment]


def _replay(request: dict[str, Any], out: Path) -> None:
    """A kernel child's op again, in this process under cProfile (trusted tasks only)."""
    import cProfile

    if request.get("op") != "run_kernel":
        return
    from threadpoolctl import threadpool_limits

    from nkibot.verify.children import kernel_side

    # One BLAS thread, as the sandbox gives every child (child_env): a threaded BLAS on a
    # busy host makes the simulator's small matmuls 1000x slower and the profile a lie.
    with tempfile.TemporaryDirectory(prefix="ttv-replay-") as tmp, threadpool_limits(1):
        prof = cProfile.Profile()
        prof.runcall(kernel_side.run_kernel, {**request, "out_dir": tmp})
        prof.dump_stats(str(out))


def child_main(case: str, file: Path, out_dir: Path, profile_dir: Path | None) -> None:
    events: list[dict[str, Any]] = [{"what": "script", "start": time.time(), "end": None}]
    sys.path.insert(0, str(REPO))
    _instrument(events, profile_dir, case)
    from nkibot.cli import main as cli_main

    argv = ["convert", f"{file}::{CASES[case][1]}", "--out", str(out_dir)]
    status = 0
    try:
        sys.argv = ["nkibot", *argv]
        cli_main()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    events.append({"what": "exit", "start": time.time(), "end": None, "status": status})
    sys.__stdout__.write("TTV " + json.dumps(events) + "\n")


# ---- the parent: spawn, time, tabulate ---------------------------------------------------

def run_case(case: str, kb: Path, max_elements: int | None, profile_dir: Path | None,
             mode: str = "warm") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ttv-") as tmp:
        file = _source_file(case, kb, Path(tmp), max_elements)
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", case,
                "--file", str(file), "--out", str(Path(tmp) / "out")]
        if profile_dir is not None:
            argv[1:1] = ["-m", "cProfile", "-o", str(profile_dir / f"{case}.parent.prof")]
            argv += ["--profile", str(profile_dir)]
        spawned = time.time()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO),
                                   "NKIBOT_WARM_SANDBOX": "1" if mode == "warm" else "0"})
        ended = time.time()
    line = next((ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("TTV ")), None)
    if line is None:
        return {"case": case, "mode": mode, "error": (proc.stderr or proc.stdout)[-800:],
                "total": ended - spawned}
    events = json.loads(line[4:])
    status = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("TTV ")][:1]
    return {"case": case, "mode": mode, "spawned": spawned, "ended": ended, "events": events,
            "verdict": status[0].split(":")[0] if status else "", "total": ended - spawned}


def breakdown(run: dict[str, Any]) -> dict[str, float]:
    """Seconds per stage and per child kind (children are inside their stages)."""
    events, t0 = run["events"], run["spawned"]
    stages = [e for e in events if e["what"].startswith("stage ")]
    returned = next(e["start"] for e in events if e["what"] == "pipeline returned")
    out: dict[str, float] = {"start-up": (stages[0]["start"] if stages else returned) - t0}
    bounds = [e["start"] for e in stages[1:]] + [returned]
    for stage, end in zip(stages, bounds, strict=True):
        out[stage["what"].removeprefix("stage ")] = end - stage["start"]
    out["report"] = run["ended"] - returned
    for e in events:
        if e["end"] is not None:
            key = e["what"]
            out[key] = out.get(key, 0.0) + e["end"] - e["start"]
            out[f"{key} n"] = out.get(f"{key} n", 0) + 1
    out["total"] = run["total"]
    return out


COLUMNS = ["start-up", "backend", "reference", "loop", "profile", "report", "total"]
CHILDREN = ["describe child", "lowering child", "reference child", "compile child", "verify child",
            "cost child", "profile child"]


def table(runs: list[dict[str, Any]]) -> str:
    head = ("| case | mode | verdict | " + " | ".join(COLUMNS) + " | "
            + " | ".join(f"{c}ren (n)" for c in CHILDREN) + " |")
    rows = [head, "|" + "---|" * (3 + len(COLUMNS) + len(CHILDREN))]
    for run in runs:
        if "error" in run:
            rows.append(f"| {run['case']} | {run.get('mode', '')} | "
                        f"error: {run['error'][-200:]!r} |")
            continue
        b = breakdown(run)
        cells = [f"{b[c]:.1f}" if c in b else "-" for c in COLUMNS]
        kids = [f"{b[c]:.1f} ({int(b[c + ' n'])})" if c in b else "-" for c in CHILDREN]
        rows.append(f"| {run['case']} | {run.get('mode', 'warm')} | {run['verdict']} | "
                    + " | ".join(cells + kids) + " |")
    return "\n".join(rows)


def top_functions(path: Path, count: int = 12) -> str:
    import io
    import pstats

    lines = []
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(str(path), stream=buf).sort_stats(key).print_stats(count)
        body = buf.getvalue()
        lines.append(f"== {path.name} by {key} ==\n" + body[body.find("   ncalls"):].rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), default=None)
    parser.add_argument("--kb", type=Path, default=KB, help="KernelBench root (level1..3)")
    parser.add_argument("--max-input-elements", type=int, default=4194304)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--modes", default="warm",
                        help="comma-separated: warm (default settings), cold (no warm sandbox)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child, args.file, args.out, args.profile)
        return 0
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs = []
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("warm", "cold") for m in modes):
        parser.error("--modes takes warm, cold or both")
    for case in args.case or list(CASES):
        for mode in modes:
            runs.append(run_case(case, args.kb, args.max_input_elements, args.profile, mode))
            b = breakdown(runs[-1]) if "events" in runs[-1] else {}
            print(f"{case} ({mode}): {runs[-1]['total']:.1f} s {runs[-1].get('verdict', '')}"
                  f" {json.dumps({k: round(v, 2) for k, v in b.items()})}", flush=True)
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} (wall seconds, this host)")
    print(table(runs))
    if args.profile is not None:
        for prof in sorted(args.profile.glob("*.prof")):
            print(top_functions(prof))
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
