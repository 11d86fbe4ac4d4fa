"""Pure renderers: one ConversionResult -> check-run output, PR body, report, comments.

The check run, the PR body and the Markdown report all draw from the same section
builders, so the evidence reads the same everywhere. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Literal

from nkibot.config.platform import describe_platform
from nkibot.github.charts import baseline, charts, utilisation_chart
from nkibot.github.output import (
    ANNOTATIONS_PER_REQUEST,
    GITHUB_TEXT_LIMIT,
    CheckRunOutput,
    annotation_batches,
    cut,
)
from nkibot.results import ConversionResult, TrialStats, TurnRecord

__all__ = [
    "ANNOTATIONS_PER_REQUEST", "GITHUB_TEXT_LIMIT", "CheckRunOutput", "Conclusion",
    "annotation_batches", "check_run_output", "conclusion", "cut", "error_comment",
    "error_output", "isolation_of", "markdown_report", "one_line", "pr_body",
    "progress_output", "reply_comment", "summary", "title", "where_measured",
]

SIMULATED = "simulator: not a latency measurement"
_LEVELS = {"error": "failure", "warning": "warning", "notice": "notice"}
_ICONS = {"verified": "✅", "compiled": "⚠️", "failed": "❌", "declined": "🚫",
          "cancelled": "⏹️"}

Conclusion = Literal["success", "failure", "neutral", "cancelled"]


def conclusion(result: ConversionResult) -> Conclusion:
    if result.status == "verified":
        # A verified kernel that misses the repo's performance requirement is neutral.
        unmet = result.requirements is not None and not result.requirements.met
        return "neutral" if unmet else "success"
    if result.status == "compiled":
        return "neutral"
    if result.status == "cancelled":
        return "cancelled"
    return "failure"


def where_measured(result: ConversionResult) -> str:
    if result.profile is not None:
        return result.profile.measured_on
    return f"{result.platform.capitalize()} hardware" if result.hardware else SIMULATED


def isolation_of(result: ConversionResult) -> str | None:
    """`full` or `reduced: <what is missing>`, as the verification's sandbox reported it
    (None when nothing ran in the sandbox)."""
    labels = result.verify.isolation if result.verify is not None else []
    level = next((x.partition(": ")[2] for x in labels if x.startswith("isolation: ")), None)
    if level is None:
        return None
    missing = [x.partition(": ")[2] for x in labels if x.startswith("missing: ")]
    return f"{level} ({'; '.join(missing)} missing)" if missing else level


def checked_for(result: ConversionResult) -> str:
    """The generation the rules came from: `trn2 (NeuronCore-v3)`."""
    return describe_platform(result.platform)


def _short(target: str) -> str:
    return target.rpartition("::")[2] or target


def _first_line(text: str, limit: int = 140) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def title(result: ConversionResult) -> str:
    """The outcome in one line."""
    name, turns = _short(result.target), result.turns
    where = f"{result.platform.capitalize()} hardware" if result.hardware else "simulated"
    plural = "turn" if turns == 1 else "turns"
    reason = _first_line(result.reasons[0]) if result.reasons else ""
    if result.status == "verified":
        return f"Verified NKI kernel for {name} ({where}, {turns} {plural})"
    if result.status == "compiled":
        return f"{name}: kernel compiled but did not verify ({where}, {turns} {plural})"
    if result.status == "cancelled":
        return f"{name}: conversion cancelled"
    verb = "declined" if result.status == "declined" else "failed"
    return f"{name}: conversion {verb}" + (f": {reason}" if reason else "")


def one_line(result: ConversionResult) -> str:
    return f"{_ICONS[result.status]} {title(result)}"


def _err(value: float) -> str:
    return f"{value:.3g}"


def trials_table(trials: list[TrialStats]) -> str:
    head = ("| trial | inputs | seed | output | max abs err | max rel err | mean abs err "
            "| mismatched | NaN/Inf | atol / rtol | result |\n"
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    rows = []
    for t in trials:
        shape = "" if t.shape_ok and t.dtype_ok else (
            f" (shape {t.actual_shape} vs {t.expected_shape}, "
            f"dtype {t.actual_dtype} vs {t.expected_dtype})")
        rows.append(
            f"| {t.trial} | {t.label or '-'} | {t.seed if t.seed is not None else '-'} "
            f"| {t.output} | {_err(t.max_abs_error)} | {_err(t.max_rel_error)} "
            f"| {_err(t.mean_abs_error)} | {t.mismatched}/{t.total} "
            f"| {t.nan_count}/{t.inf_count} | {t.atol:g} / {t.rtol:g} "
            f"| {'pass' if t.passed else 'FAIL'}{shape} |")
    return "\n".join([head, *rows])


def _counter(name: str, value: object) -> str:
    if isinstance(value, dict):
        parts = [f"{k} {v}" for k, v in value.items() if v]
        return f"{name}: " + (", ".join(parts) or "none")
    return f"{name} {value}"


def optimize_table(result: ConversionResult) -> str:
    """The optimize phase's chain, every candidate: turn, time, change, verified, kept."""
    rows = ["| turn | time (µs) | change | verified | kept |", "|---:|---:|---|---|---|"]
    for s in result.optimize_chain:
        t = "-" if s.time_us is None else f"{s.time_us:.1f}"
        verified = {True: "yes", False: "no", None: "not run"}[s.verified]
        kept = (f"yes ({s.reason})" if s.reason else "yes") if s.kept else f"no: {s.reason}"
        rows.append(f"| {s.turn} | {t} | {s.change.replace('|', '/')} | {verified} "
                    f"| {kept.replace('|', '/')} |")
    sources = sorted({s.source for s in result.optimize_chain if s.source})
    return "\n".join(rows) + (f"\n\nTimes: {'; '.join(sources)}." if sources else "")


def performance_section(result: ConversionResult) -> str:
    """The cost model's figures, labelled; on hardware beside the measured time."""
    profile = result.profile
    model = profile.model if profile is not None else {}
    if profile is None or not model or "time_us" not in model:
        return ""
    measured = "beside the measured time above" if profile.hardware else (
        "not a measurement: nothing here was timed")
    lines = [f"Modelled device time: **{model['time_us']} µs** ({model.get('label')}; "
             f"{measured}).",
             f"Roofline fraction: {float(str(model.get('roofline_fraction', 0))):.1%} "
             f"({model.get('roofline_bound')}-bound lower bound {model.get('roofline_us')} µs). "
             f"Bottleneck: **{model.get('critical_engine')}**, the engine with the most time "
             "on the critical path (the chain of dependent instructions that sets the "
             "modelled time). It can differ from the busiest engine in the chart below, "
             "whose work may overlap with the critical path instead of lengthening it. DMA: "
             f"{model.get('dma_transfers')} transfers, {model.get('dma_bytes')} bytes, "
             f"efficiency {model.get('dma_efficiency')}."]
    ratio = profile.model_ratio
    if profile.hardware and ratio is not None:
        lines.append(f"Measured against modelled: the model's estimate is {ratio:.2f}× the "
                     f"measured p50 on {profile.measured_on}.")
    chart = utilisation_chart(result)
    return "\n\n".join(lines + ([chart] if chart else []))


def latency_section(result: ConversionResult) -> str:
    where = where_measured(result)
    profile = result.profile
    if profile is None or not profile.hardware or profile.kernel is None:
        lines = [f"Measured on: **{where}**."]
        if not result.hardware:
            modelled = (profile is not None and "time_us" in profile.model)
            lines.append("The simulator checks correctness and does not time the kernel, so "
                         "no latency was measured" + (
                             "; the time under Performance is the cost model's estimate of "
                             "it, not a measurement." if modelled else "."))
        if profile is not None and profile.sim_stats:
            lines.append("Simulator counters (work done, not time): "
                         + "; ".join(_counter(k, v) for k, v in sorted(profile.sim_stats.items()))
                         + ".")
        return "\n\n".join(lines)
    rows = ["| | p50 (µs) | p99 (µs) | mean (µs) | iterations |", "|---|---:|---:|---:|---:|"]
    base = baseline(result)
    entries = [("NKI kernel", profile.kernel)] + ([base] if base else [])
    rows += [f"| {n} | {x.p50_us:.1f} | {x.p99_us:.1f} | {x.mean_us:.1f} | {x.iterations} |"
             for n, x in entries]
    speed = profile.speedup_vs_device or profile.speedup_vs_cpu
    extra = f"\n\nSpeed-up (p50) vs {base[0]}: **{speed:.2f}×**." if speed and base else ""
    return f"Measured on: **{where}**.\n\n" + "\n".join(rows) + extra


def run_table(result: ConversionResult) -> str:
    tok = result.tokens
    return "\n".join([
        "| turns | tokens (in / out / cache read / cache write) | wall time | model | backend |",
        "|---:|---|---:|---|---|",
        f"| {result.turns} | {tok.input} / {tok.output} / {tok.cache_read} / {tok.cache_write} "
        f"| {result.seconds:.1f} s | {result.model} | {result.backend} |",
    ])


def summary(result: ConversionResult) -> str:
    """The evidence tables shared by the check run, the PR body and the report."""
    isolation = isolation_of(result)
    parts = [f"**{one_line(result)}**", f"Target: `{result.target}` · checked for: "
             f"{checked_for(result)} · measured on: {where_measured(result)}"
             + (f" · isolation: {isolation}" if isolation else "")]
    if result.reasons:
        parts.append("### Why\n" + "\n".join(f"- {r}" for r in result.reasons))
    if result.verify is not None and result.verify.trials:
        passed = sum(t.passed for t in result.verify.trials)
        parts.append(f"### Verification ({passed}/{len(result.verify.trials)} trials passed)\n"
                     + trials_table(result.verify.trials))
    parts.append("### Latency\n" + latency_section(result))
    perf = performance_section(result)
    if perf:
        parts.append("### Performance\n" + perf)
    if result.optimize_chain:
        parts.append("### Optimize\n" + optimize_table(result))
    if result.requirements is not None:
        req = result.requirements
        mark = "met" if req.met else "**not met** (the pull request opens as a draft)"
        parts.append(f"### Requirements\n`{req.requirement}`: {mark}. {req.detail}.")
    parts.append("### Run\n" + run_table(result))
    if result.kernel is not None:
        parts.append(f"Calling convention: {result.calling_convention}")
    return cut("\n\n".join(parts), what="summary")


def _turn_status(t: TurnRecord) -> str:
    if t.verified:
        return "verified"
    if t.compiled:
        return "compiled, not verified"
    return "no kernel" if t.compiled is None else "compile failed"


def transcript(turns: list[TurnRecord]) -> str:
    out = []
    for t in turns:
        err = f" · max abs err {_err(t.max_abs_error)}" if t.max_abs_error is not None else ""
        out.append(f"#### Turn {t.turn} · {t.model} · {_turn_status(t)}{err} · "
                   f"{t.seconds:.1f} s · {t.tokens.total} tokens")
        out += [f"- `{c.name}` → {'ok' if c.ok else 'failed'}: {_first_line(c.result_summary, 300)}"
                for c in t.tool_calls]
        if t.error:
            out.append(f"\n```text\n{t.error[-2000:]}\n```")
        if t.text.strip():
            quoted = "\n".join("> " + line for line in t.text.strip()[:3000].splitlines())
            out.append("\n" + quoted)
        out.append("")
    return "\n".join(out)


def compile_log_tail(result: ConversionResult, chars: int = 6000) -> str:
    log = result.compile.log if result.compile is not None else ""
    if not log.strip():
        return ""
    return f"### Compile log (last {min(chars, len(log))} characters)\n```text\n{log[-chars:]}\n```"


def details_text(result: ConversionResult) -> str:
    """Per-turn transcript plus the compile-log tail, cut to GitHub's limit with a note."""
    log = compile_log_tail(result)
    budget = GITHUB_TEXT_LIMIT - len(log) - 2
    body = cut("### Transcript\n\n" + transcript(result.transcript), budget, what="transcript")
    return body + ("\n\n" + log if log else "")


def kernel_annotations(result: ConversionResult, *,
                       line_offset: int = 0) -> list[dict[str, object]]:
    """Compile/verify diagnostics located on kernel lines (`line_offset`: header lines)."""
    path = result.kernel.path if result.kernel is not None else None
    diags = list(result.compile.diagnostics if result.compile is not None else [])
    diags += result.verify.diagnostics if result.verify is not None else []
    out: list[dict[str, object]] = []
    for d in diags:
        if d.line is None or path is None:
            continue
        line = d.line + line_offset
        message = d.message + (f"\nFix: {d.fix}" if d.fix else "")
        out.append({"path": path, "start_line": line, "end_line": line,
                    "annotation_level": _LEVELS[d.severity], "title": d.rule,
                    "message": message[:4000]})
    return out


def check_run_output(result: ConversionResult, *, line_offset: int = 0) -> CheckRunOutput:
    return CheckRunOutput(title=title(result), summary=summary(result),
                          text=details_text(result),
                          annotations=kernel_annotations(result, line_offset=line_offset))


def progress_output(target: str, last: TurnRecord | None, *, elapsed_s: float,
                    max_turns: int | None = None, stage: str = "") -> CheckRunOutput:
    """The in-progress output: turn number, last outcome, elapsed time."""
    name = _short(target)
    if last is None:
        head = f"{name}: {stage or 'starting'} ({elapsed_s:.0f} s)"
        return CheckRunOutput(title=head, summary=f"Working on `{target}`: {head}.")
    of = f"/{max_turns}" if max_turns else ""
    err = f", max abs err {_err(last.max_abs_error)}" if last.max_abs_error is not None else ""
    head = f"{name}: turn {last.turn}{of}, {_turn_status(last)}{err} ({elapsed_s:.0f} s)"
    return CheckRunOutput(title=head, summary=f"Working on `{target}`.\n\n{head}",
                          text=cut(transcript([last]), what="turn"))


def error_output(target: str, message: str, hint: str = "") -> CheckRunOutput:
    """A failed check run for a problem the user can fix (bad target, dead job)."""
    text = f"**{message}**" + (f"\n\n{hint}" if hint else "")
    return CheckRunOutput(title=f"{_short(target)}: {_first_line(message)}",
                          summary=cut(text, what="summary"))


def pr_body(result: ConversionResult, *, target: str, sha: str, check_run_url: str | None,
            closes_issue: int | None, files: list[str] | None = None) -> str:
    links = f" Details: [check run]({check_run_url})." if check_run_url else ""
    parts = [f"## NKI kernel for `{target}`",
             f"Generated by nkibot from commit `{sha[:12]}`.{links}", summary(result)]
    parts += ["### Charts", *charts(result)] if charts(result) else []
    if files:
        parts.append("### Files\n" + "\n".join(f"- `{f}`" for f in files))
    tests = [f for f in files or [] if f.rsplit("/", 1)[-1].startswith("test_")]
    if tests:
        parts.append(f"Run the check yourself: `python -m pytest {tests[0]}`")
    if closes_issue is not None:
        parts.append(f"Closes #{closes_issue}")
    parts.append("<sub>Re-run with `/nki retry`; a retry updates this PR.</sub>")
    return cut("\n\n".join(parts), what="PR body")


def markdown_report(result: ConversionResult) -> str:
    parts = [f"# nkibot report: `{result.target}`", summary(result), *charts(result),
             "## Transcript\n\n" + transcript(result.transcript)]
    log = compile_log_tail(result, chars=20_000)
    return "\n\n".join(parts + ([log] if log else [])) + "\n"


_NEXT_STEPS = {
    "declined": ("The model could not take this target on. A runner with Claude configured "
                 "(ANTHROPIC_API_KEY or Bedrock) may: try `/nki convert {target} --model claude`."),
    "failed": ("The check run holds the transcript and the compile log. `/nki retry` runs it "
               "again; the check run's **Retry +5 turns** gives the loop more room."),
    "compiled": ("A kernel compiled but did not match the reference within tolerance; the check "
                 "run shows the worst elements. **Retry +5 turns** gives the loop more room."),
}


def reply_comment(result: ConversionResult, *, pr_url: str | None,
                  check_run_url: str | None) -> str:
    """A one-line outcome, links to the PR and check run, and a next step when it failed."""
    links = [f"[pull request]({pr_url})" if pr_url else "",
             f"[check run]({check_run_url})" if check_run_url else ""]
    joined = " · ".join(x for x in links if x)
    parts = [one_line(result)] + ([joined] if joined else [])
    step = _NEXT_STEPS.get(result.status)
    if step:
        parts.append(step.format(target=result.target))
    return "\n\n".join(parts)


def error_comment(target: str, message: str, *, hint: str = "",
                  check_run_url: str | None = None) -> str:
    """The helpful reply for a target nkibot could not work on."""
    lines = [f"❌ Could not convert `{target}`: {message}"]
    if hint:
        lines.append(hint)
    if check_run_url:
        lines.append(f"[check run]({check_run_url})")
    return "\n\n".join(lines)
