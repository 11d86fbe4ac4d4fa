"""Compiler and runtime output from the Neuron SDK, parsed into located Diagnostics.

Formats recognised (documented ones in the Neuron SDK docs and its issue tracker):

- neuronx-cc log lines: `2023-07-14T18:16:48Z ERROR 26345 [neuronx-cc]: <text>`
  (also WARNING and INFO);
- bracketed error codes: `[NCC_EVRF001] <text>` (the Graph Compiler's documented codes)
  and short driver codes such as `[F134] neuronx-cc terminated abnormally`;
- Python tracebacks raised by the NKI front end while tracing the kernel:
  `File "<kernel.py>", line N, in <fn>` frames, then `<ExceptionType>: <text>`;
- compiler-style locations: `<kernel.py>:N[:col]: error: <text>`;
- Neuron Runtime errors: `NRT Error NRT_EXEC_OOB(1006): <text>`.

Each message gets the same rule ids as our simulator (so the agent loop's feedback and
the check-run annotations read alike whichever backend ran) and the matching fix hint.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Literal

from nkibot.results import Diagnostic
from nkibot.sim.errors import FIXES

Severity = Literal["error", "warning", "notice"]

_CC_LINE = re.compile(
    r"^\S+\s+(?P<level>ERROR|WARNING|WARN|INFO)\s+\d+\s+\[neuronx?-cc\]:\s?(?P<text>.*)$"
)
_CODE = re.compile(r"\[(?P<code>NCC_[A-Z]{4}\d{3}|[A-Z]{1,4}\d{2,4})\]\s*(?P<text>.*)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit)):\s*(?P<text>.*)$")
_LOCATED = re.compile(
    r"^(?P<file>[^\s:]+\.py):(?P<line>\d+)(?::\d+)?:\s*(?P<level>error|warning|note):\s*"
    r"(?P<text>.*)$"
)
_NRT = re.compile(r"NRT Error (?P<name>NRT_[A-Z_]+)\((?P<num>\d+)\):?\s*(?P<text>.*)")

#: Message text -> the simulator's rule id; first match wins, most specific first.
_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I), rule)
    for pattern, rule in (
        (r"neuronxcc\.nki", "legacy-dialect"),
        (r"psum.*(bank|2\s*kib|2048)|bank.*psum", "psum-bank"),
        (r"psum.*(overflow|exceed|capacity|out of space)", "psum-capacity"),
        (r"sbuf.*(overflow|exceed|capacity|out of space)|couldn't be allocated in sb",
         "sbuf-capacity"),
        (r"partition.*mismatch|mismatch.*partition", "partition-mismatch"),
        (r"partition.*(exceed|> ?128|greater than 128|at most 128|pmax)", "partition-dim"),
        (r"moving.*(free|512)|gemm_moving_fmax", "matmul-moving-free"),
        (r"stationary.*(free|128)|gemm_stationary_fmax", "matmul-stationary-free"),
        (r"contraction", "matmul-contraction"),
        (r"address space|expected operand .*(hbm|sbuf|psum)|in buffer|wrong buffer",
         "buffer-illegal"),
        (r"out[- ]of[- ]bounds|out of range|NRT_EXEC_OOB", "out-of-bounds"),
        (r"immutable|read[- ]only|cannot (assign|modify|update)", "read-only"),
        (r"broadcast", "broadcast"),
        (r"dtype|data type", "dtype-illegal"),
    )
)

_EXTRA_FIXES = {
    "legacy-dialect": "import nki / nki.language / nki.isa, not neuronxcc.nki",
    "compile-timeout": "simplify the kernel (fewer unrolled loops, smaller static_range)",
    "out-of-memory": "the kernel's tensors do not fit device memory; use smaller shapes/tiles",
    "runtime": "the NEFF compiled but failed on the NeuronCore; check DMA indices and shapes",
}


def classify(text: str, code: str | None = None) -> str:
    """The rule id for one message: a known family, else the compiler's code, else generic."""
    for pattern, rule in _FAMILIES:
        if pattern.search(text):
            return rule
    if code and code.startswith("NCC_EOOM"):
        return "out-of-memory"
    if code:
        return f"neuronx-cc:{code}"
    return "compile-error"


def fix_for(rule: str) -> str | None:
    return FIXES.get(rule) or _EXTRA_FIXES.get(rule.split(":", 1)[0])


def _same_file(candidate: str, kernel_file: str | None) -> bool:
    if kernel_file is None:
        return False
    return PurePath(candidate).name == PurePath(kernel_file).name


def _diag(text: str, severity: Severity, file: str | None, line: int | None,
          code: str | None = None, rule: str | None = None) -> Diagnostic:
    rule = rule or classify(text, code)
    return Diagnostic(
        rule=rule, message=text.strip(), file=file, line=line, severity=severity,
        fix=fix_for(rule),
    )


def parse_compiler_log(log: str, kernel_file: str | None = None) -> list[Diagnostic]:
    """Diagnostics in order of appearance; tracebacks point at the kernel's innermost line."""
    diagnostics: list[Diagnostic] = []
    frame: tuple[str, int] | None = None  # innermost kernel frame of the current traceback
    seen: set[tuple[str, str | None, int | None]] = set()

    def add(diag: Diagnostic) -> None:
        key = (diag.message, diag.file, diag.line)
        if diag.message and key not in seen:
            seen.add(key)
            diagnostics.append(diag)

    for raw in log.splitlines():
        line = raw.rstrip()
        if m := _CC_LINE.match(line):
            level, line = m["level"], m["text"]
            if level not in ("ERROR", "WARNING", "WARN") or not line.strip(" *"):
                continue
        else:
            level = None
        if (m := _FRAME.match(line)) and _same_file(m["file"], kernel_file):
            frame = (str(kernel_file), int(m["line"]))
        elif m := _NRT.search(line):
            text = f"{m['name']}({m['num']}): {m['text']}"
            add(_diag(text, "error", None, None, rule=classify(text) if "OOB" in m["name"]
                      else f"runtime:{m['name']}"))
        elif m := _LOCATED.match(line):
            severity: Severity = "error" if m["level"] == "error" else "warning"
            file = str(kernel_file) if _same_file(m["file"], kernel_file) else m["file"]
            add(_diag(m["text"], severity, file, int(m["line"])))
        elif m := _CODE.search(line):
            severity = "warning" if level in ("WARNING", "WARN") else "error"
            file, where = frame or (None, None)
            add(_diag(m["text"] or line, severity, file, where, code=m["code"]))
        elif m := _EXC.match(line.strip()):
            file, where = frame or (None, None)
            add(_diag(f"{m['type']}: {m['text']}", "error", file, where))
            frame = None
        elif level in ("ERROR", "WARNING", "WARN") and not line.lstrip().startswith("File "):
            add(_diag(line, "error" if level == "ERROR" else "warning", None, None))
    return diagnostics


def timeout_diagnostic(seconds: float) -> Diagnostic:
    rule = "compile-timeout"
    return Diagnostic(
        rule=rule, message=f"neuronx-cc did not finish within {seconds:.0f} s; killed",
        severity="error", fix=fix_for(rule),
    )
