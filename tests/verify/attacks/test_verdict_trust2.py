"""Issue 26, class 1: the verdict accepts wrong kernels. Our own attacks, each through the
real sandboxed verifier: a constant bias under atol, a broken (all-NaN) reference, a sign
that is NaN at zero, and a reference child whose outputs are not plain .npy files."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.convert.verify_cli import check_kernel
from nkibot.task import Task
from nkibot.verify import isolation
from nkibot.verify.reference import ReferenceRunError, compute_reference
from tests.verify.attacks.conftest import task_for, verify
from tests.verify.attacks.test_class5_weak_trials import SOFTMAX

UNARY = '''
import nki
import nki.language as nl


@nki.jit
def unary_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        tile = nl.load(x[i * 128:(i + 1) * 128, 0:64])
        nl.store(out[i * 128:(i + 1) * 128, 0:64], value=BODY)
    return out
'''
SIGN = UNARY.replace("BODY", "nl.sign(tile)")
SIGN_BY_DIVISION = UNARY.replace("BODY", "nl.divide(tile, nl.abs(tile))")
NAN = UNARY.replace("BODY", "nl.multiply(tile, float('nan'))")


def _refs(entry: str) -> Task:
    return task_for("special_refs.py", entry=entry)


def test_softmax_plus_a_constant_under_atol_fails(full_isolation: isolation.Isolation) -> None:
    """Every element of the softmax is off by 0.9 * atol (rows sum to 1.06): each element
    is within tolerance, the aggregate is not."""
    task = task_for("softmax_ref.py", shape=(128, 64), has_get_inputs=False)
    biased = SOFTMAX.replace("nisa.tensor_scalar(dst=r, data=e, op0=nl.multiply, operand0=inv)",
                             "nisa.tensor_scalar(dst=r, data=e, op0=nl.multiply, operand0=inv,"
                             " op1=nl.add, operand1=0.0009)")
    assert biased != SOFTMAX
    with compute_reference(task) as ref:
        result = verify(biased, task, ref, function="softmax_kernel")
    assert not result.passed
    assert any(r.startswith("numeric:aggregate") and "bias +0.0009" in r
               for r in result.reasons), result.reasons
    normal = [s for s in result.trials if s.label == "normal"]
    assert normal and all(s.mismatched == 0 and not s.aggregate_ok for s in normal)


def test_all_nan_reference_proves_nothing(full_isolation: isolation.Isolation) -> None:
    """A kernel returning NaN against a reference that is NaN everywhere fails, and the
    verdict says the reference itself is broken."""
    task = _refs("NanEverywhere")
    with compute_reference(task) as ref:
        result = verify(NAN, task, ref, function="unary_kernel")
    assert not result.passed
    assert any(r.startswith("reference:broken output 0") and "reference itself is broken" in r
               for r in result.reasons), result.reasons


def test_sign_by_division_fails_at_zero_and_honest_sign_passes(
        full_isolation: isolation.Isolation) -> None:
    """`x / |x|` is NaN at exactly 0 (and -0.0): only the special-values trial has exact
    zeros, and it fails there. nl.sign passes every trial."""
    task = _refs("Sign")
    with compute_reference(task) as ref:
        honest = verify(SIGN, task, ref, function="unary_kernel")
        wrong = verify(SIGN_BY_DIVISION, task, ref, function="unary_kernel")
    assert honest.passed, honest.reasons
    assert not wrong.passed
    failing = {s.label for s in wrong.trials if not s.passed}
    assert failing == {"special values"}, wrong.reasons


@pytest.mark.parametrize(("entry", "cause"), [
    ("PlantLink", "Too many levels of symbolic links"),
    ("PlantFifo", "not a regular file"),
    ("PlantPickle", "not a .npy array")])
def test_reference_child_outputs_that_are_not_plain_arrays(
        entry: str, cause: str, full_isolation: isolation.Isolation) -> None:
    """A reference child that swaps a written output for a link, a FIFO or a pickle is
    refused with the cause (ReferenceRunError), and `nkibot verify` ends in a failed
    verdict naming it: no uncaught BadArrayFile or OSError."""
    task = _refs(entry)
    with pytest.raises(ReferenceRunError, match="output was refused") as caught:
        compute_reference(task)
    assert cause in str(caught.value) and "trial0_out0.npy" in str(caught.value)
    from nkibot.backends.sim import SimBackend

    backend = SimBackend(function="unary_kernel", kernel_file="k.py")
    result = check_kernel(task, SIGN, str(Path("k.py")), backend, "unary_kernel")
    assert result.status == "compiled"  # compiled, not verified: the verdict fails
    assert any(r.startswith("reference:failed") and cause in r for r in result.reasons), (
        result.reasons)
