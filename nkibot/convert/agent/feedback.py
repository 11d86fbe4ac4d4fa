"""Turn compile/verify results into short, actionable feedback for the model (pure).

Compile errors give the error, its kernel line quoted, and the rule with its usual fix
(the diagnostic's own `fix` when the backend has one, else the table below). Numeric
failures give per-trial statistics and the worst elements. Guard failures say what is
forbidden and why the kernel was rejected.
"""

from __future__ import annotations

import re

from nkibot.results import CompileResult, Diagnostic, TrialStats, VerifyResult

MAX_DIAGNOSTICS = 3
MAX_WORST = 3
LOG_TAIL_LINES = 8

#: Usual fixes, matched by substring against the rule name then the message.
RULE_FIXES: tuple[tuple[str, str], ...] = (
    ("partition", "tile the first (partition) dimension in chunks of nl.tile_size.pmax (128); "
                  "put the long dimension on the free axis"),
    ("psum", "matmul results go to a PSUM tile of at most 128 x 512 fp32 (one bank); "
             "copy PSUM to SBUF with nisa.tensor_copy before any DMA"),
    ("bank", "keep each matmul output within one PSUM bank: free size <= 512 fp32"),
    ("moving", "the moving operand's free size must be <= 512 (gemm_moving_fmax); split N"),
    ("stationary", "the stationary operand's free size must be <= 128; split M"),
    ("contraction", "the contraction dim is the partition dim of both matmul operands (<= 128)"),
    ("matmul", "nc_matmul(dst, stationary, moving) computes stationary.T @ moving into PSUM"),
    ("buffer", "check each operand's buffer: DMA moves HBM<->SBUF, compute reads SBUF/PSUM"),
    ("address space", "check each operand's buffer: DMA moves HBM<->SBUF, compute reads "
                      "SBUF/PSUM"),
    ("hbm", "compute engines cannot read HBM: dma_copy into an nl.sbuf tile first"),
    ("out of bound", "slice within the tensor's shape; handle the last partial tile separately"),
    ("bounds", "slice within the tensor's shape; handle the last partial tile separately"),
    ("broadcast", "nl binary ops do not broadcast: use .broadcast_to or nisa.tensor_scalar "
                  "with a [P, 1] operand"),
    ("shape", "the operands' shapes must match exactly (partition and free sizes)"),
    ("dtype", "cast explicitly (dtype= on the op, or nisa.tensor_copy into a tile of the "
              "target dtype); matmul operands must both be fp32 if one is"),
    ("axis", "reduce over free axes only (axis >= 1); transpose first to reduce partitions"),
    ("uninitial", "every tile must be written before it is read"),
    ("attribute", "that name is not in the nki API: lookup_nki the operation you need"),
    ("import", "import only nki, nki.language as nl, nki.isa as nisa, numpy and math"),
    ("immutable", "kernel inputs are read-only: write results into a new nl.ndarray"),
    ("syntax", "fix the Python syntax; send the complete file"),
    ("timeout", "the kernel ran past the time limit: look for a loop that never ends, or far "
                "too many tiny tiles"),
    ("memory", "the kernel exhausted memory: allocate tiles inside the loop body, never a whole "
               "large tensor on chip or in Python lists"),
    ("crash", "the kernel's process crashed: simplify the failing step and check indices"),
)

#: Guard failures (VerifyResult.reasons prefixes) and what they forbid.
GUARD_EXPLANATIONS: tuple[tuple[str, str], ...] = (
    ("torch", "kernels may not import or call torch: compute with nki ops only"),
    ("numpy-name", "numpy gives dtypes, constants and ufuncs only: compute with nl/nisa ops"),
    ("module-as-value", "use module members directly; never assign or pass a module"),
    ("module-rebound", "an imported module's name may not be re-bound"),
    ("module-state", "module level holds only imports, functions and constants"),
    ("mutable-default", "defaults must be constants: nothing may survive between calls"),
    ("attribute-assignment", "never assign attributes on modules, functions or classes"),
    ("underscore", "private (_name) attributes are refused: use the public nki API"),
    ("class-not-allowed", "classes must be nl.NKIObject dataclasses"),
    ("import", "only nki, numpy and math may be imported"),
    ("file", "kernels may not read or write files"),
    ("network", "kernels may not use the network"),
    ("process", "kernels may not start processes or touch the OS"),
    ("exec", "exec/eval/compile/__import__/globals are forbidden"),
    ("dunder", "dunder attribute access is forbidden"),
    ("inputs-modified", "the kernel wrote into an input: write only to arrays it allocates"),
    ("outputs-constant", "outputs did not change when inputs changed: compute from the inputs"),
    ("insensitive", "outputs did not change when inputs changed: compute from the inputs"),
    ("nondetermin", "two runs on identical inputs disagreed: remove any state or randomness"),
    ("copies-input", "the output just copies an input: implement the computation"),
    ("cach", "outputs must not be cached between calls: compute every call"),
)


def usual_fix(diag: Diagnostic) -> str | None:
    if diag.fix:
        return diag.fix
    for text in (diag.rule.lower(), diag.message.lower()):
        for key, fix in RULE_FIXES:
            if key in text:
                return fix
    return None


def quote_line(src: str, line: int | None) -> str | None:
    lines = src.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return None
    return f"    {line} | {lines[line - 1].rstrip()}"


def clean_message(diag: Diagnostic) -> str:
    """The message without what the feedback shows anyway: the rule tag, location, fix."""
    text = diag.message.strip()
    text = text.replace(f"[{diag.rule}] ", "", 1)
    if text.startswith(f"{diag.rule} "):  # static findings: "static:<rule> <detail>"
        text = text[len(diag.rule) + 1:]
    text = re.sub(r" \(at [^()]*:\d+\)", "", text)
    if diag.fix and f"; fix: {diag.fix}" in text:
        text = text.replace(f"; fix: {diag.fix}", "")
    return text


def format_diagnostic(diag: Diagnostic, src: str) -> str:
    where = f" at kernel line {diag.line}" if diag.line is not None else ""
    out = [f"{diag.severity} [{diag.rule}]{where}: {clean_message(diag)}"]
    quoted = quote_line(src, diag.line)
    if quoted:
        out.append(quoted)
    fix = usual_fix(diag)
    if fix:
        out.append(f"  usual fix: {fix}")
    return "\n".join(out)


def _log_tail(log: str) -> str:
    tail = [ln for ln in log.strip().splitlines() if ln.strip()][-LOG_TAIL_LINES:]
    return "\n".join("  " + ln for ln in tail)


def compile_feedback(result: CompileResult, src: str) -> str:
    """Feedback for a compile result (success is one line)."""
    if result.ok:
        return f"compile: OK ({result.compiler or result.backend}, {result.seconds:.1f} s)"
    errors = [d for d in result.diagnostics if d.severity == "error"] or result.diagnostics
    parts = [f"compile: FAILED ({result.compiler or result.backend})"]
    parts += [format_diagnostic(d, src) for d in errors[:MAX_DIAGNOSTICS]]
    if len(errors) > MAX_DIAGNOSTICS:
        parts.append(f"(+{len(errors) - MAX_DIAGNOSTICS} more errors)")
    if not errors and result.log.strip():
        parts.append("log tail:\n" + _log_tail(result.log))
    return "\n".join(parts)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def trial_line(t: TrialStats) -> str:
    seed = "-" if t.seed is None else t.seed
    head = f"trial {t.trial} (seed {seed}{', ' + t.label if t.label else ''}"
    head += f", output {t.output})" if t.output else ")"
    if not t.shape_ok:
        return f"{head}: SHAPE expected {t.expected_shape} got {t.actual_shape}"
    verdict = "pass" if t.passed else "FAIL"
    line = (f"{head}: {verdict} max_abs {_fmt(t.max_abs_error)} max_rel {_fmt(t.max_rel_error)}"
            f" mean_abs {_fmt(t.mean_abs_error)} mismatched {t.mismatched}/{t.total}")
    if t.nan_count or t.inf_count:
        line += f" NaN {t.nan_count} Inf {t.inf_count}"
    if not t.dtype_ok:
        line += f" DTYPE expected {t.expected_dtype} got {t.actual_dtype}"
    return line


def numeric_hints(trials: list[TrialStats]) -> list[str]:
    """Patterns in the failing statistics that point at a likely cause."""
    failed = [t for t in trials if not t.passed]
    hints: list[str] = []
    if any(t.nan_count for t in failed):
        hints.append("NaN in the output usually means reading memory never written, or an "
                     "output region never stored (check the last partial tile).")
    ratio = _constant_ratio(failed)
    if ratio is not None:
        hints.append(f"outputs are the expected values times ~{ratio:.4g}: check scale factors "
                     "and constants.")
    if failed and all(t.total and t.mismatched >= 0.9 * t.total for t in failed if t.shape_ok):
        hints.append("(almost) every element is wrong: check the formula, operand order and "
                     "scaling.")
    elif any(t.total and 0 < t.mismatched < t.total // 4 for t in failed):
        hints.append("only some elements are wrong: check tile boundaries, the last partial "
                     "tile and index arithmetic.")
    if failed and all(t.label and "large" in t.label for t in failed):
        hints.append("only large-magnitude inputs fail: check overflow and numerically "
                     "stable forms (e.g. subtract the max before exp).")
    return hints


def _constant_ratio(failed: list[TrialStats]) -> float | None:
    """actual/expected when every worst element shows the same ratio (a wrong constant)."""
    ratios = [w.actual / w.expected for t in failed for w in t.worst
              if w.expected and abs(w.expected) > 1e-6 and w.actual == w.actual]
    if len(ratios) < 2:
        return None
    first = ratios[0]
    if abs(first - 1.0) < 1e-2 or any(abs(r - first) > 1e-2 * abs(first) for r in ratios):
        return None
    return first


def verify_feedback(result: VerifyResult, src: str) -> str:
    """Feedback for a verify result: guards, compile-time diagnostics, statistics."""
    if result.passed:
        worst = max((t.max_abs_error for t in result.trials), default=0.0)
        return f"verify: PASSED all {len(result.trials)} trials (max_abs {_fmt(worst)})"
    failed = sum(not t.passed for t in result.trials)
    head = f" ({failed} of {len(result.trials)} trials failed)" if failed else ""
    parts = [f"verify: FAILED{head}"]
    for reason in result.reasons:
        if result.trials and reason.startswith("numeric:"):
            continue  # the per-trial statistics below say the same, with more detail
        parts.append(f"- {reason}" + _guard_note(reason))
    parts += [format_diagnostic(d, src) for d in result.diagnostics[:MAX_DIAGNOSTICS]]
    if result.trials:
        t0 = result.trials[0]
        parts.append(f"tolerance atol={t0.atol:g} rtol={t0.rtol:g}; per trial:")
        parts += ["  " + trial_line(t) for t in result.trials]
        parts += _worst_lines(result.trials)
        parts += [f"hint: {h}" for h in numeric_hints(result.trials)]
    if not (result.reasons or result.diagnostics or result.trials) and result.log.strip():
        parts.append("log tail:\n" + _log_tail(result.log))
    return "\n".join(parts)


def _guard_note(reason: str) -> str:
    low = reason.lower()
    for key, note in GUARD_EXPLANATIONS:
        if key in low:
            return f" — {note}"
    return ""


def _worst_lines(trials: list[TrialStats]) -> list[str]:
    failing = [t for t in trials if not t.passed and t.worst] or [t for t in trials if t.worst]
    if not failing:
        return []
    t = max(failing, key=lambda x: x.max_abs_error)
    lines = [f"worst elements (trial {t.trial}):"]
    for w in t.worst[:MAX_WORST]:
        lines.append(f"  {w.index}: expected {_fmt(w.expected)} got {_fmt(w.actual)} "
                     f"(abs err {_fmt(w.abs_error)})")
    return lines


def summary(text: str, limit: int = 160) -> str:
    """One line of a feedback text (its verdict and first detail), for transcripts."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0]
    if "FAILED" in line and len(lines) > 1:
        line = f"{line}: {lines[1]}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def result_summary(compile_result: CompileResult | None, verify: VerifyResult | None,
                   limit: int = 160) -> str | None:
    """One line for transcripts and progress: the verdict and the decisive detail."""
    line: str | None = None
    if compile_result is not None and not compile_result.ok:
        diag = next(iter(compile_result.diagnostics), None)
        detail = (f"[{diag.rule}]" + (f" line {diag.line}" if diag.line else "") +
                  f": {clean_message(diag)}") if diag else _last_line(compile_result.log)
        line = f"compile: FAILED {detail}"
    elif verify is not None and verify.passed:
        worst = max((t.max_abs_error for t in verify.trials), default=0.0)
        line = f"verify: PASSED {len(verify.trials)} trials, max_abs {_fmt(worst)}"
    elif verify is not None:
        failed = [t for t in verify.trials if not t.passed]
        # The near-constant note explains how trials were compared; it is not the failure.
        other = [r for r in verify.reasons
                 if not r.startswith(("numeric:", "reference:near-constant"))]
        if other:
            line = "verify: FAILED " + "; ".join(other)
        elif failed:
            worst = max(t.max_abs_error for t in failed)
            line = (f"verify: FAILED {len(failed)}/{len(verify.trials)} trials, "
                    f"max_abs {_fmt(worst)} (atol {failed[0].atol:g})")
        else:
            line = "verify: FAILED " + (_last_line(verify.log) or "no statistics")
    elif compile_result is not None:
        line = "compile: OK"
    if line is None:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
