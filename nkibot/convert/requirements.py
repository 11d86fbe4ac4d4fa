"""The repository's performance requirement, checked against a verified kernel (pure).

`requirements: {min_speedup: X}` applies on hardware (measured speed-up vs PyTorch);
`{min_roofline_fraction: Y}` off it (the cost model's roofline fraction, a model
estimate). A verified kernel that misses it gets a neutral check run saying by how much,
and its pull request opens as a draft.
"""

from __future__ import annotations

from nkibot.results import ProfileResult, RequirementsCheck


def check(profile: ProfileResult | None, hardware: bool, min_speedup: float | None,
          min_roofline_fraction: float | None) -> RequirementsCheck | None:
    """The applicable requirement's verdict, or None when none applies."""
    if hardware and min_speedup is not None:
        got = None if profile is None else (profile.speedup_vs_device or profile.speedup_vs_cpu)
        return _verdict(f"min_speedup {min_speedup:g}", got, min_speedup,
                        "measured speed-up vs PyTorch (p50)", "x")
    if not hardware and min_roofline_fraction is not None:
        raw = None if profile is None else profile.model.get("roofline_fraction")
        got = float(raw) if isinstance(raw, int | float) else None
        label = "" if profile is None else str(profile.model.get("label", ""))
        return _verdict(f"min_roofline_fraction {min_roofline_fraction:g}", got,
                        min_roofline_fraction, f"roofline fraction ({label})", "")
    return None


def _verdict(name: str, got: float | None, wanted: float, what: str,
             unit: str) -> RequirementsCheck:
    if got is None:
        return RequirementsCheck(requirement=name, met=False, wanted=wanted,
                                 detail=f"no {what} was available to check {name}")
    met = got >= wanted
    short = "" if met else f", short by {wanted - got:.3g}{unit} ({100 * (1 - got / wanted):.0f}%)"
    return RequirementsCheck(requirement=name, met=met, actual=got, wanted=wanted,
                             detail=f"{what}: {got:.3g}{unit} vs required {wanted:g}{unit}{short}")
