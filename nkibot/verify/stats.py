"""Error statistics of a kernel's output against the reference (pure NumPy, no I/O).

An element matches when |actual - expected| <= atol + rtol * |expected| (NumPy's allclose
rule), or when both are NaN, or both the same infinity. Relative error divides by
max(|expected|, atol) so that near-zero references do not make it meaningless.

A reference that is near-constant (every element within tolerance of 0, or of its
median) would let a kernel that returns a constant pass. Such outputs are flagged and
compared relatively: atol shrinks to atol times the reference's own spread (at least
`ULP_FLOOR` ulps of the constant).

The reference is an fp32 run; its own error against a float64 run of the same model
(`Expected.ref_error`) bounds what fp32 arithmetic can reach: an element within twice that
of the reference matches too (a matmul over thousands of offset terms is several ulps off
in any summation order, more than a relative atol of its small spread).

A low-precision output (bf16, fp16, fp8) cannot be closer to the fp32 reference than its
own rounding: an element within one ulp of the output dtype at the reference's magnitude
matches on every trial (a correct bf16 GEMM at offset +100 gives outputs near 1e7, where a
bf16 ulp is 65536, while the near-constant comparison alone allowed a few hundred).

Per element, `atol` is absolute: a kernel that adds a constant just under it to every
element of a softmax passes each element while its rows sum to 1.58. So the errors are
also judged in aggregate, relative to the output's scale (`aggregate_limit`): the mean
absolute error must stay within `rtol` times the reference's RMS (plus the reference's own
error and one output ulp), which catches a bias or noise that is small per element but
large against what the output holds.

On any trial but the normal ones (special values: exact zeros, -0.0, ties, the smallest
normal; large magnitude, offsets, overflow scale) a NaN in the reference marks an element
the reference has no value for, and that element is not compared: an input outside the
operator's domain, or an intermediate of the reference that overflowed (PyTorch's CPU
cumprod accumulates in double; past double's range its product is inf, and inf * 0 is
NaN where the true product, and a kernel summing logarithms, is 0). Normal trials stay
strict: there a kernel must give NaN where the reference does.

fp32's inf stands for every value past the largest finite one, so at the edge of the
output dtype's range an infinity and a finite value of the same sign match when the
finite one is within tolerance of that largest value (a kernel's exp(sum of logs) that
rounds to inf where the reference's product is 3.4028e38, or the reverse).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkibot.results import TrialStats, WorstElement
from nkibot.task import Tolerance
from nkibot.verify.protocol import NUMPY_DTYPES, finfo, is_float

WORST = 5
#: The relative comparison of a near-constant reference allows at least this many ulps of
#: the constant: fp32 sums of thousands of terms near it (a matrix-vector product over
#: offset inputs, accumulated in 128-row blocks as PSUM does) are 10-20 ulps off in any
#: order, while returning the constant misses by the reference's whole spread.
ULP_FLOOR = 16
_EXACT = Tolerance(atol=0.0, rtol=0.0)
#: Explicit mantissa bits of the low-precision output dtypes (fp32's ulp is left out: it
#: is far below any tolerance).
_MANTISSA = {"bfloat16": 7, "float16": 10, "float8_e4m3": 3, "float8_e5m2": 2}
#: The aggregate check needs enough elements for a mean to mean something; a scalar
#: output is judged per element only.
AGGREGATE_MIN = 32
SPECIAL_LABEL = "special values"
#: What `compare` adds to the label of an output judged as near-constant.
NEAR_CONSTANT_LABEL = "reference near-constant: compared relatively"
# 64-bit outputs have no NKI dtype; the kernel returns the 32-bit one.
_ACCEPTED = {"float64": {"float64", "float32"}, "int64": {"int64", "int32"}}


@dataclass(frozen=True)
class Expected:
    """One reference output of one trial, and what the kernel's output must look like."""

    values: np.ndarray[Any, Any]
    dtype: str  # PyTorch's native output dtype name
    trial: int
    seed: int | None
    label: str
    output: int
    #: the reference's own error (max |fp32 run - float64 run|); 0.0 when unknown
    ref_error: float = 0.0


def _within(values: np.ndarray[Any, Any], centre: float, tol: Tolerance) -> bool:
    return bool(np.all(np.abs(values - centre) <= tol.atol + tol.rtol * np.abs(values)))


#: Elements per piece when the parent judges an output: the float64 temporaries of a piece
#: (a dozen of 2 MiB) stay in cache, where whole-output ones of a 66M-element output were
#: 528 MB each, and allocating and faulting them in was most of the judging's time.
CHUNK = 1 << 18


def _pieces(values: np.ndarray[Any, Any], chunk: int) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
    flat = values.reshape(-1)
    for start in range(0, max(flat.size, 1), chunk):
        yield start, flat[start:start + chunk]


def _finite_range(values: np.ndarray[Any, Any], chunk: int = CHUNK) -> tuple[float, float] | None:
    """(min, max) of the finite elements in float64, or None when there are none."""
    lo, hi = np.inf, -np.inf
    for _, piece in _pieces(values, chunk):
        if not piece.size:
            continue
        # in the native dtype first: finite ends mean every element is finite (a NaN
        # makes both NaN, an infinity an end), and the float64 of an end is exact
        least, most = float(piece.min()), float(piece.max())
        if not (math.isfinite(least) and math.isfinite(most)):
            e = piece.astype(np.float64)
            finite = e[np.isfinite(e)]
            if not finite.size:
                continue
            least, most = float(finite.min()), float(finite.max())
        lo, hi = min(lo, least), max(hi, most)
    return None if lo > hi else (lo, hi)


def _all_within(values: np.ndarray[Any, Any], centre: float, tol: Tolerance,
                chunk: int) -> bool:
    for _, piece in _pieces(values, chunk):
        e = piece.astype(np.float64)
        if not _within(e[np.isfinite(e)], centre, tol):
            return False
    return True


def near_constant(expected: np.ndarray[Any, Any], tol: Tolerance,
                  chunk: int = CHUNK) -> tuple[float, float] | None:
    """(centre, spread) when a constant (0 or the median) would pass; None when it would not.

    Decided on the extremes first, exactly: a constant that fails the smallest or the
    largest element fails the whole output, and no constant passes both when they are
    further apart than twice the tolerance. Only an output that survives that (one that
    may be near-constant) is checked element by element; the median is found only then.
    Most outputs are not near-constant, and at 57M elements the full checks took ~10 s.
    """
    return _near_constant(expected, tol, _finite_range(expected, chunk), chunk)


def _near_constant(expected: np.ndarray[Any, Any], tol: Tolerance,
                   found: tuple[float, float] | None,
                   chunk: int) -> tuple[float, float] | None:
    """`near_constant` given the finite range (`_finite_range`) of `expected`."""
    if found is None:
        return None
    ends = np.array(found)
    lo, hi = abs(found[0]), abs(found[1])
    reach = 2 * tol.atol + tol.rtol * (lo + hi)
    # float64 rounding in the element-wise rule is ~1e-16 relative: 1e-9 is far beyond it
    apart = found[1] - found[0] > reach + 1e-9 * (lo + hi + tol.atol)
    for centre in (0.0, None):
        if centre is None:
            if apart:
                return None
            e = expected.astype(np.float64).reshape(-1)
            centre = float(np.median(e[np.isfinite(e)]))
        if _within(ends, centre, tol) and _all_within(expected, centre, tol, chunk):
            spread = max(abs(found[0] - centre), abs(found[1] - centre))
            return centre, spread
    return None


def dtype_ok(expected: str, actual: str) -> bool:
    return actual in _ACCEPTED.get(expected, {expected})


@dataclass
class _Sums:
    """What `compare` gathers over the pieces of one output."""

    mismatched: int = 0
    outside: int = 0
    nans: int = 0
    infs: int = 0
    max_err: float = 0.0
    max_rel: float = 0.0
    finite_err: float = 0.0
    finite_n: int = 0
    compared: int = 0
    signed: float = 0.0
    err_compared: float = 0.0
    square_compared: float = 0.0
    #: (-error, flat index, expected, actual) of each piece's worst, mismatches and all
    worst_bad: list[tuple[float, int, float, float]] = field(default_factory=list)
    worst_all: list[tuple[float, int, float, float]] = field(default_factory=list)


def compare(exp: Expected, actual: np.ndarray[Any, Any], actual_dtype: str,
            tol: Tolerance, chunk: int = CHUNK) -> TrialStats:
    """Statistics for one output of one trial; `passed` needs shape, dtype and values.

    The output is judged piece by piece (`CHUNK` elements) with the same rules; only the
    sums, counts and extremes are kept. Means are sums of the pieces' sums, so they can
    differ from a one-pass mean in the last bits."""
    if not (is_float(exp.dtype) or is_float(actual_dtype)):
        tol = _EXACT
    base = TrialStats(
        trial=exp.trial, seed=exp.seed, label=exp.label, output=exp.output, passed=False,
        expected_shape=list(exp.values.shape), actual_shape=list(actual.shape),
        expected_dtype=exp.dtype, actual_dtype=actual_dtype,
        dtype_ok=dtype_ok(exp.dtype, actual_dtype), total=int(exp.values.size),
        atol=tol.atol, rtol=tol.rtol)
    if tuple(actual.shape) != tuple(exp.values.shape):
        return base.model_copy(update={"shape_ok": False, "mismatched": base.total})
    # one pass for the finite range, which both the near-constant test and the slack need
    found = _finite_range(exp.values, chunk) if tol.atol > 0 else None
    flagged = _near_constant(exp.values, tol, found, chunk)  # None without a range
    label, centre = exp.label, 0.0
    if flagged is not None:
        # Compare deviations from the constant, scaled by the reference's own spread.
        centre, spread = flagged
        floor = ULP_FLOOR * abs(float(np.spacing(np.float32(centre))))  # spacing(<0) < 0
        tol = Tolerance(atol=max(tol.atol * spread, floor), rtol=tol.rtol)
        label = f"{label}, {NEAR_CONSTANT_LABEL}".lstrip(", ")
    # an element within twice the reference's own rounding error of it also matches: a
    # kernel as accurate as the fp32 reference can be that far from it
    slack, ill = _slack(exp, tol, found)
    if ill:
        label = (f"{label}, reference ill-conditioned: its own fp32 error "
                 f"{exp.ref_error:.3g} exceeds the tolerance, compared within twice "
                 "that").lstrip(", ")
    sums = _Sums()
    flat_actual = actual.reshape(-1)
    for start, piece in _pieces(exp.values, chunk):
        _judge_piece(sums, start, piece, flat_actual[start:start + piece.size], exp, tol,
                     centre, slack)
    limit = None
    if flagged is None and sums.compared >= AGGREGATE_MIN and (tol.atol > 0 or tol.rtol > 0):
        limit = aggregate_limit(math.sqrt(sums.square_compared / sums.compared), tol, slack,
                                exp.dtype)
    aggregate_ok = limit is None or sums.err_compared / sums.compared <= limit
    # the mean of the finite errors; with none finite, the largest
    mean = sums.finite_err / sums.finite_n if sums.finite_n else sums.max_err
    return base.model_copy(update={
        "label": label,
        "passed": sums.mismatched == 0 and base.dtype_ok and aggregate_ok,
        "bias": sums.signed / sums.compared if sums.compared else 0.0,
        "aggregate_limit": limit, "aggregate_ok": aggregate_ok,
        "out_of_domain": sums.outside,
        "atol": tol.atol,
        "max_abs_error": _reportable(sums.max_err),
        "max_rel_error": _reportable(sums.max_rel),
        "mean_abs_error": _reportable(mean),
        "mismatched": sums.mismatched,
        "ill_conditioned": ill,
        "nan_count": sums.nans,
        "inf_count": sums.infs,
        "worst": _worst(sums, exp.values.shape),
    })


def _judge_piece(sums: _Sums, start: int, expected: np.ndarray[Any, Any],
                 actual: np.ndarray[Any, Any], exp: Expected, tol: Tolerance,
                 centre: float, slack: float) -> None:
    """Add one piece's counts, sums and worst elements to `sums` (the module's rules)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e = expected.astype(np.float64)
        a = actual.astype(np.float64)
        err = np.abs(a - e)
        both_nan = np.isnan(a) & np.isnan(e)
        inf_e = np.isinf(e)
        same_inf = inf_e & (a == e)
        # the reference itself has no value there (module docstring); normal trials strict
        outside = np.zeros_like(both_nan) if exp.label.startswith("normal") else np.isnan(e)
        edge = _overflow_edge(e, a, inf_e, exp.dtype, tol)
        ulp = output_ulp(e, exp.dtype)
        # the numeric rules hold only against a finite reference: against inf, rtol * |e|
        # (and a bf16 ulp) is inf, so any finite value or the other infinity passed
        near = (err <= tol.atol + tol.rtol * np.abs(e - centre)) | (err <= slack) | (
            err <= ulp)
        ok = (np.isfinite(e) & near) | both_nan | same_inf | outside | edge
        err = np.where(both_nan | same_inf | outside | edge, 0.0, err)
        err = np.where(np.isnan(err), np.inf, err)
        rel = err / np.maximum(np.abs(e), tol.atol if tol.atol > 0 else 1e-12)
        signed = a - e
        compared = np.isfinite(e) & np.isfinite(signed) & ~outside
        finite_err = err[np.isfinite(err)]
        sums.square_compared += float(np.sum(np.square(e[compared])))
    if not err.size:
        return
    bad = np.flatnonzero(~ok)
    sums.mismatched += int(bad.size)
    sums.outside += int(np.count_nonzero(outside))
    sums.nans += int(np.count_nonzero(np.isnan(a)))
    sums.infs += int(np.count_nonzero(np.isinf(a)))
    sums.max_err = max(sums.max_err, _top(err))
    sums.max_rel = max(sums.max_rel, _top(rel))
    sums.finite_err += float(np.sum(finite_err))
    sums.finite_n += int(finite_err.size)
    sums.compared += int(np.count_nonzero(compared))
    sums.signed += float(np.sum(signed[compared]))
    sums.err_compared += float(np.sum(err[compared]))
    picks = bad[largest(err[bad], WORST)] if bad.size else largest(err, WORST)
    found = [(-float(err[p]), start + int(p), float(e[p]), float(a[p])) for p in picks]
    if bad.size:
        sums.worst_bad = sorted([*sums.worst_bad, *found])[:WORST]
    elif not sums.worst_bad:
        sums.worst_all = sorted([*sums.worst_all, *found])[:WORST]


def _overflow_edge(e: np.ndarray[Any, Any], a: np.ndarray[Any, Any],
                   inf_e: np.ndarray[Any, Any], dtype: str,
                   tol: Tolerance) -> np.ndarray[Any, Any]:
    """Elements where one side is an infinity and the other, of the same sign, is finite
    within tolerance of the output dtype's largest value (float64 arrays in; `inf_e` is
    `isinf(e)`). Only the elements with exactly one infinity are examined: most outputs
    have none, and the parent judges outputs of tens of millions of elements."""
    edge: np.ndarray[Any, Any] = np.asarray(inf_e != np.isinf(a))  # 0-d outputs too
    if not edge.any() or not is_float(dtype) or dtype not in NUMPY_DTYPES \
            or tol.atol + tol.rtol <= 0:
        return np.zeros(e.shape, dtype=bool)
    big = float(finfo(NUMPY_DTYPES[dtype]).max)
    ev, av = e[edge], a[edge]
    finite = np.where(np.isinf(ev), av, ev)
    with np.errstate(invalid="ignore"):
        edge[edge] = (big - np.abs(finite) <= tol.atol + tol.rtol * big) & (
            np.sign(ev) == np.sign(av))
    return edge


def output_ulp(e: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any] | float:
    """One ulp of the low-precision output dtype at each reference value (0.0 for fp32 and
    wider): how far an honest kernel's output can be from the fp32 reference by its own
    rounding alone."""
    bits = _MANTISSA.get(dtype)
    if bits is None:
        return 0.0
    tiny = float(finfo(NUMPY_DTYPES[dtype]).tiny)
    with np.errstate(invalid="ignore", divide="ignore"):
        ulp: np.ndarray[Any, Any] = np.exp2(np.floor(np.log2(np.maximum(np.abs(e), tiny)))
                                            - bits)
    return ulp


def aggregate_limit(rms: float, tol: Tolerance, slack: float, dtype: str) -> float:
    """The most mean abs error an output whose reference has RMS `rms` allows (`compare`
    checks it with at least AGGREGATE_MIN compared elements and a tolerance that is not
    exact).

    `rtol` times the reference's RMS: `atol` is deliberately absent, since per element it
    is what a bias hides under. Twice the reference's own error (`slack`) and one output
    ulp at the RMS are added, so a kernel as accurate as the reference, rounded to its
    output dtype, always passes."""
    return tol.rtol * rms + slack + float(np.max(output_ulp(np.array([rms]), dtype)))


def _slack(exp: Expected, tol: Tolerance,
           found: tuple[float, float] | None) -> tuple[float, bool]:
    """(slack, ill-conditioned): how far from the reference an element may be, as twice the
    reference's own error (its fp32 run against a float64 run of the same model).

    The slack is capped at the tolerance the output's largest element gets, so a wildly
    inexact reference does not open the comparison, except on a stress trial (offset,
    large magnitude, overflow scale) whose reference cannot itself meet that tolerance: an
    output that cancels to near zero (KLDivLoss at +100: PyTorch's fp32 loss is 3e-3 off a
    float64 truth of -2e-5) is then compared within twice the reference's error, and the
    trial is labelled so. The normal trials carry no reference error and stay exact, so a
    kernel still has to compute the output (`judge` checks each output has such a trial).
    `found`: the reference's finite range (`_finite_range`).
    """
    if tol.atol <= 0 or exp.ref_error <= 0:
        return 0.0, False
    top = 0.0 if found is None else max(abs(found[0]), abs(found[1]))
    cap = tol.atol + tol.rtol * top
    wide = 2.0 * exp.ref_error
    if wide <= cap or exp.label.startswith("normal") or not np.isfinite(wide):
        return min(wide, cap), False
    return wide, True


def _reportable(value: float) -> float:
    """JSON has no infinity: an infinite (or NaN) error is reported as the largest float."""
    return value if math.isfinite(value) else float(np.finfo(np.float64).max)


def _top(values: np.ndarray[Any, Any]) -> float:
    """The largest value, NaN counting as infinite (a NaN reference's relative error)."""
    top = float(np.max(values))
    return np.inf if np.isnan(top) else top


def _worst(sums: _Sums, shape: tuple[int, ...]) -> list[WorstElement]:
    """The largest errors, mismatches first, with their multi-dimensional indices."""
    out = []
    for neg, p, expected, actual in sums.worst_bad or sums.worst_all:
        index = [int(i) for i in np.unravel_index(p, shape)]
        out.append(WorstElement(index=index, expected=expected, actual=actual,
                                abs_error=-neg))
    return out


def largest(values: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any]:
    """Indices of the `count` largest of `values` (1-D, no NaN), largest first, equal
    values in index order: one distinct value per pass, at most `count` passes.

    A partial sort (argpartition) took seconds on tens of millions of errors, most of
    them equal, for the five a report shows.
    """
    found: list[np.ndarray[Any, Any]] = []
    left, under = count, np.ones(values.shape, bool)
    while left > 0 and under.any():
        top = values.max(where=under, initial=-np.inf)
        at = np.flatnonzero((values == top) & under)[:left]
        found.append(at)
        left -= at.size
        under &= values < top
    return np.concatenate(found) if found else np.zeros(0, np.intp)


def mismatch_reason(stats: TrialStats) -> str:
    """The named reason for one failing TrialStats."""
    where = f"trial {stats.trial} output {stats.output}"
    if not stats.shape_ok:
        return (f"numeric:shape {where}: expected {stats.expected_shape}, "
                f"got {stats.actual_shape}")
    if not stats.dtype_ok:
        return f"numeric:dtype {where}: expected {stats.expected_dtype}, got {stats.actual_dtype}"
    if not stats.aggregate_ok and stats.mismatched == 0:
        return (f"numeric:aggregate {where} ({stats.label}): every element is within "
                f"tolerance, but the mean abs error {stats.mean_abs_error:.3g} (bias "
                f"{stats.bias:+.3g}) is more than the output's scale allows "
                f"({stats.aggregate_limit or 0.0:.3g}: rtol={stats.rtol:.3g} times its RMS): "
                "a systematic error that is small per element but large in aggregate")
    at = f" at {stats.worst[0].index}" if stats.worst else ""
    return (f"numeric:mismatch {where} ({stats.label}): {stats.mismatched}/{stats.total} "
            f"elements outside atol={stats.atol:.3g} rtol={stats.rtol:.3g}, max abs error "
            f"{stats.max_abs_error:.3g}{at}")
