"""Mermaid charts for PR bodies and Markdown reports (GitHub renders ```mermaid blocks).

Pure functions of a ConversionResult. The latency chart exists only for hardware figures:
a simulator run has no latency to draw, and drawing one would claim what was not measured.
"""

from __future__ import annotations

from nkibot.results import ConversionResult, Latency, TurnRecord


def _turn_label(record: TurnRecord) -> str:
    if record.verified:
        state = "verified"
    elif record.compiled:
        state = "compiled, mismatch"
    elif record.compiled is None:
        state = "no kernel"
    else:
        state = "compile error"
    return f"T{record.turn} {state}"


def _num(value: float) -> str:
    return f"{value:.6g}"


def convergence_chart(result: ConversionResult) -> str | None:
    """Max abs error and compile status per turn, or None when there were no turns."""
    turns = result.transcript
    if not turns:
        return None
    labels = ", ".join(f'"{_turn_label(t)}"' for t in turns)
    # Turns that produced no output have no error to plot; they plot as 0 and their
    # label says why, so a reader never mistakes them for exact results.
    values = ", ".join(_num(t.max_abs_error or 0.0) for t in turns)
    return "\n".join([
        "```mermaid",
        "xychart-beta",
        '    title "Convergence: max abs error per turn"',
        f"    x-axis [{labels}]",
        '    y-axis "max abs error"',
        f"    bar [{values}]",
        "```",
        "_Turns without a compiled kernel have no error to measure and plot as 0._",
    ])


def baseline(result: ConversionResult) -> tuple[str, Latency] | None:
    """The PyTorch baseline to compare against: on the same device if measured, else CPU."""
    profile = result.profile
    if profile is None:
        return None
    if profile.torch_device is not None:
        return "PyTorch (Neuron device)", profile.torch_device
    if profile.torch_cpu is not None:
        return "PyTorch (CPU)", profile.torch_cpu
    return None


def latency_chart(result: ConversionResult) -> str | None:
    """p50/p99 latency of PyTorch vs the kernel; only when measured on hardware."""
    profile = result.profile
    base = baseline(result)
    if profile is None or not profile.hardware or profile.kernel is None or base is None:
        return None
    name, torch_lat = base
    kernel = profile.kernel
    labels = '"PyTorch p50", "NKI p50", "PyTorch p99", "NKI p99"'
    values = ", ".join(_num(v) for v in (
        torch_lat.p50_us, kernel.p50_us, torch_lat.p99_us, kernel.p99_us))
    return "\n".join([
        "```mermaid",
        "xychart-beta",
        f'    title "Latency in microseconds ({profile.measured_on}; baseline {name})"',
        f"    x-axis [{labels}]",
        '    y-axis "microseconds"',
        f"    bar [{values}]",
        "```",
    ])


def utilisation_chart(result: ConversionResult) -> str | None:
    """Modelled busy fraction per engine (the cost model's, labelled as an estimate)."""
    profile = result.profile
    util = profile.model.get("utilisation") if profile is not None else None
    if profile is None or not isinstance(util, dict) or not util:
        return None
    names = ", ".join(f'"{k}"' for k in util)
    values = ", ".join(_num(100.0 * float(v)) for v in util.values())
    return "\n".join([
        "```mermaid",
        "xychart-beta",
        f'    title "Engine utilisation, % of modelled time ({profile.model.get("label")})"',
        f"    x-axis [{names}]",
        '    y-axis "percent busy" 0 --> 100',
        f"    bar [{values}]",
        "```",
    ])


def charts(result: ConversionResult) -> list[str]:
    # The utilisation chart sits in the Performance section (render.performance_section).
    return [c for c in (convergence_chart(result), latency_chart(result)) if c is not None]
