"""Why one kernel is modelled faster than another, from two reports' `as_dict()` (pure).

The optimize phase keeps a candidate only when the model says it is faster; this says
what changed in the model's own terms: spilled bytes, loop tiles that lost their second
buffer, busy time of the engines, DMA efficiency. Loads no simulator.
"""

from __future__ import annotations

from typing import Any


def _num(m: dict[str, Any], key: str) -> float:
    v = m.get(key)
    return float(v) if isinstance(v, int | float) else 0.0


def _of(m: dict[str, Any], key: str, kind: type) -> Any:
    v = m.get(key)
    return v if isinstance(v, kind) else kind()


def allocation(m: dict[str, Any]) -> str:
    """The report's spills and single-buffered tiles, for a prompt ("" when none)."""
    out = ""
    spilled: list[Any] = _of(m, "spilled", list)
    if _num(m, "spill_bytes") or _num(m, "refill_bytes"):
        tiles = ", ".join(f"{s.get('tile')} {s.get('bytes')} B" for s in spilled[:3])
        out += (f" Spills: {int(_num(m, 'spill_bytes'))} bytes saved and reloaded, "
                f"{int(_num(m, 'refill_bytes'))} bytes of HBM copies re-read, where live "
                f"tiles exceed on-chip memory ({tiles}).")
    single = m.get("single_buffered")
    if isinstance(single, list) and single:
        out += (" Single-buffered, iterations serialise (two buffers do not fit): "
                + ", ".join(str(s) for s in single[:3]) + ".")
    return out


def why_faster(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What the model sees change from `before` to `after` (both `CostReport.as_dict()`)."""
    parts = []
    for key, what in (("spill_bytes", "spill bytes"), ("refill_bytes", "refill bytes")):
        sb, sa = _num(before, key), _num(after, key)
        if sb != sa:
            parts.append(f"{what} {int(sb)} -> {int(sa)}")
    nb = len(before.get("single_buffered") or [])
    na = len(after.get("single_buffered") or [])
    if nb != na:
        parts.append(f"single-buffered tiles {nb} -> {na}")
    busy_b: dict[str, Any] = _of(before, "busy_us", dict)
    busy_a: dict[str, Any] = _of(after, "busy_us", dict)
    for engine in sorted(set(busy_b) | set(busy_a)):
        b, a = float(busy_b.get(engine, 0.0)), float(busy_a.get(engine, 0.0))
        if abs(a - b) > 0.05 * max(a, b, 1e-9) and max(a, b) > 0.0:
            parts.append(f"{engine} busy {b:.1f} -> {a:.1f} us")
    eb, ea = _num(before, "dma_efficiency"), _num(after, "dma_efficiency")
    if abs(ea - eb) >= 0.01:
        parts.append(f"DMA efficiency {eb:.2f} -> {ea:.2f}")
    if not parts:  # same work, better overlap
        parts.append(f"critical engine {before.get('critical_engine')} -> "
                     f"{after.get('critical_engine')}; the same work overlaps better")
    return "; ".join(parts)
