"""Judge a kernel's outputs over all trials: statistics plus the dynamic guards.

Backend-agnostic: any backend that ran the kernel on the ReferenceSet's trial inputs
(sim in a sandboxed child, neuron on a device) hands the outputs here. The kernel never
sees expected outputs; this runs in the parent.

Dynamic guards (each a named reason):
- `guard:inputs-modified` - the kernel wrote into an input or state tensor;
- `guard:nondeterministic` - two runs on identical inputs disagreed;
- `guard:outputs-constant` - outputs identical across trials whose references differ;
- `guard:output-copies-input` - an output is an input, unchanged, and the reference is not;
- `guard:seed-specific` - right on the first trial only (replayed or cached outputs);
- `guard:ill-conditioned` - an output compared on no trial within its tolerance, only
  within the reference's own fp32 error (see `stats._slack`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkibot.results import Diagnostic, TrialStats
from nkibot.task import Task, Tolerance
from nkibot.verify.protocol import dtype_name
from nkibot.verify.reference import ReferenceSet
from nkibot.verify.stats import NEAR_CONSTANT_LABEL, Expected, compare, mismatch_reason

_PRECISION = {"float8_e4m3": 0, "float8_e5m2": 0, "bfloat16": 1, "float16": 2, "float32": 3}
MAX_NUMERIC_REASONS = 8
Arrays = list[np.ndarray[Any, Any]]


@dataclass
class KernelRun:
    """What a backend observed: outputs per completed trial and the dynamic facts."""

    outputs: list[Arrays]
    inputs_modified: list[str] = field(default_factory=list)
    deterministic: bool | None = None
    arg_names: list[str] = field(default_factory=list)


@dataclass
class Judgement:
    trials: list[TrialStats]
    reasons: list[str]
    diagnostics: list[Diagnostic]

    @property
    def passed(self) -> bool:
        return not self.reasons and bool(self.trials) and all(t.passed for t in self.trials)


def tolerance(task: Task, reference: ReferenceSet, output_dtype: str) -> Tolerance:
    """The loosest tolerance among the input dtypes and the output's native dtype."""
    dtypes = [s.dtype for s in task.inputs] + [output_dtype]
    known = [d for d in dtypes if d in _PRECISION] or ["float32"]
    return task.tolerance_for(min(known, key=_PRECISION.__getitem__))


def judge(task: Task, reference: ReferenceSet, run: KernelRun) -> Judgement:
    trials: list[TrialStats] = []
    reasons: list[str] = broken_reference(reference)
    notes: list[Diagnostic] = []
    for t, outputs in enumerate(run.outputs):
        ref = reference.trials[t]
        if len(outputs) != len(ref.expected):
            reasons.append(f"numeric:output-count trial {t}: expected {len(ref.expected)} "
                           f"output(s), got {len(outputs)}")
            continue
        for k, actual in enumerate(outputs):
            exp = Expected(values=reference.expected(t, k), dtype=ref.native_dtypes[k],
                           trial=t, seed=ref.seed, label=ref.label, output=k,
                           ref_error=ref.ref_errors[k] if k < len(ref.ref_errors) else 0.0)
            tol = tolerance(task, reference, exp.dtype)
            stats = compare(exp, actual, dtype_name(actual.dtype), tol)
            trials.append(stats)
            if NEAR_CONSTANT_LABEL in stats.label and not stats.ill_conditioned:
                notes.append(Diagnostic(
                    rule="reference:near-constant", severity="notice",
                    message=f"trial {t} output {k}: the reference is near-constant, so it is "
                            "compared relatively (returning a constant would not pass)"))
            if stats.ill_conditioned:
                notes.append(Diagnostic(
                    rule="reference:ill-conditioned", severity="notice",
                    message=f"trial {t} output {k} ({ref.label}): the fp32 reference is itself "
                            f"{exp.ref_error:.3g} off a float64 run, more than the tolerance; "
                            "compared within twice that"))
    failing = [s for s in trials if not s.passed]
    reasons += [mismatch_reason(s) for s in failing[:MAX_NUMERIC_REASONS]]
    if len(failing) > MAX_NUMERIC_REASONS:
        reasons.append(f"numeric:mismatch {len(failing) - MAX_NUMERIC_REASONS} more failing "
                       "trial outputs")
    reasons = _guards(reference, run, trials) + _undiscriminated(trials) + reasons
    if len(run.outputs) < len(reference.trials):
        reasons.append(f"numeric:trials-missing only {len(run.outputs)} of "
                       f"{len(reference.trials)} trials ran")
    if notes and reasons:
        reasons.append("reference:near-constant (compared relatively)")
    return Judgement(trials=trials, reasons=reasons, diagnostics=notes)


def broken_reference(reference: ReferenceSet) -> list[str]:
    """Outputs the reference never gives a finite value for, on any trial.

    NaN matches NaN, and the outputs-constant guard sees no change between all-NaN trials,
    so against such a reference a kernel returning NaN would "verify". It proves nothing:
    the reference itself is broken, and the verdict says so."""
    broken = []
    for k in range(reference.output_count):
        if not any(k < len(t.expected) and np.isfinite(reference.expected(i, k)).any()
                   for i, t in enumerate(reference.trials)):
            broken.append(f"reference:broken output {k} is NaN or infinite everywhere on "
                          f"every trial ({len(reference.trials)}): the reference itself is "
                          "broken, so matching it proves nothing")
    return broken


def _guards(reference: ReferenceSet, run: KernelRun, trials: list[TrialStats]) -> list[str]:
    reasons = []
    if run.inputs_modified:
        reasons.append(f"guard:inputs-modified {', '.join(sorted(set(run.inputs_modified)))}")
    if run.deterministic is False:
        reasons.append("guard:nondeterministic two runs on identical inputs disagreed")
    reasons += _constant_outputs(reference, run.outputs)
    reasons += _copied_inputs(reference, run)
    normal = [s for s in trials if s.label.startswith("normal")]
    first = [s for s in normal if s.trial == 0]
    later = {s.trial for s in normal if s.trial != 0}
    failed_later = {s.trial for s in normal if s.trial != 0 and not s.passed}
    if first and all(s.passed for s in first) and later and failed_later == later:
        reasons.append("guard:seed-specific correct on the first trial only: outputs were "
                       "replayed or cached, not computed from the inputs")
    return reasons


def _undiscriminated(trials: list[TrialStats]) -> list[str]:
    """Outputs compared only within the reference's own error: no trial tested them."""
    outputs = sorted({s.output for s in trials})
    return [f"guard:ill-conditioned output {k}: the reference's own fp32 error exceeds the "
            "tolerance on every trial, so no trial tests the kernel's values"
            for k in outputs if all(s.ill_conditioned for s in trials if s.output == k)]


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _constant_outputs(reference: ReferenceSet, outputs: list[Arrays]) -> list[str]:
    if len(outputs) < 2:
        return []
    reasons = []
    for k in range(min(len(o) for o in outputs)):
        if not all(_same(outputs[0][k], o[k]) for o in outputs[1:]):
            continue
        expected = [reference.expected(t, k) for t in range(len(outputs))
                    if k < len(reference.trials[t].expected)]
        if any(not np.array_equal(expected[0], e, equal_nan=True) for e in expected[1:]):
            reasons.append(f"guard:outputs-constant output {k} is identical for every trial "
                           "while the reference changes with the inputs")
    return reasons


def _copied_inputs(reference: ReferenceSet, run: KernelRun) -> list[str]:
    reasons = []
    for t, outputs in enumerate(run.outputs[:2]):
        inputs = reference.inputs(t)
        for k, out in enumerate(outputs):
            for i, x in enumerate(inputs):
                if out.shape != x.shape or not np.array_equal(
                        out.astype(np.float64), x.astype(np.float64), equal_nan=True):
                    continue
                exp = reference.expected(t, k) if k < len(reference.trials[t].expected) else None
                if exp is not None and exp.shape == x.shape and np.allclose(
                        exp.astype(np.float64), x.astype(np.float64), equal_nan=True):
                    continue  # the reference itself is (close to) the identity here
                name = run.arg_names[i] if i < len(run.arg_names) else f"input {i}"
                reasons.append(f"guard:output-copies-input output {k} is input {name} unchanged")
    return list(dict.fromkeys(reasons))
