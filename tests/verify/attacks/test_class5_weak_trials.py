"""Class 5: predictable and weak trials (answers stored for known seeds; a softmax
without max-subtraction that only overflows far from the standard normal)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from nkibot.task import Task
from nkibot.verify import isolation
from nkibot.verify.children.torch_side import _trial_inputs
from nkibot.verify.reference import ReferenceSet, compute_reference
from tests.verify.attacks.conftest import task_for, verify

SOFTMAX = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0:128, 0:64])
    row_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=t, axis=1, negate=True)
    e = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, bias=row_max, reduce_op=nl.add,
                    reduce_res=total)
    inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=total)
    r = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=e, op0=nl.multiply, operand0=inv)
    nl.store(out[0:128, 0:64], value=r)
    return out
'''
NAIVE = SOFTMAX.replace("bias=row_max, ", "")


@pytest.fixture(scope="module")
def softmax_task() -> Task:
    return task_for("softmax_ref.py", shape=(128, 64), has_get_inputs=False)


@pytest.fixture(scope="module")
def softmax_ref(softmax_task: Task, full_isolation: isolation.Isolation
                ) -> Iterator[ReferenceSet]:
    with compute_reference(softmax_task) as ref:
        yield ref


def test_stable_softmax_verifies(softmax_task: Task, softmax_ref: ReferenceSet) -> None:
    """The honest kernel passes every trial, the offset and overflow ones included."""
    result = verify(SOFTMAX, softmax_task, softmax_ref, function="softmax_kernel")
    assert result.passed, result.reasons


def test_softmax_without_max_subtraction_fails(softmax_task: Task,
                                               softmax_ref: ReferenceSet) -> None:
    """exp(x) overflows on the +100 offset and the overflow-scale trial: NaN, refused."""
    result = verify(NAIVE, softmax_task, softmax_ref, function="softmax_kernel")
    assert not result.passed
    failing = {t.label.split(",")[0] for t in result.trials if not t.passed}
    assert "offset +100" in failing and any(f.startswith("overflow scale") for f in failing)
    assert all(t.passed for t in result.trials if t.label == "normal")


def _stored_keys(softmax_task: Task) -> set[str]:
    """What an attacker who knows the old seeds (0..4, and 1004) would key answers by."""
    keys = set()
    for seed in [*range(5), 1004]:
        (x,) = _trial_inputs(None, [s.model_dump() for s in softmax_task.inputs], seed)
        keys.add(hashlib.sha256(x.numpy().tobytes()).hexdigest())
    return keys


def test_answers_stored_for_predictable_seeds_never_match(
        softmax_task: Task, softmax_ref: ReferenceSet) -> None:
    """Seeds are secret and fresh per verification: none of the inputs the kernel will
    be given is one an attacker could have precomputed an answer for (a kernel keyed on
    its inputs' bytes would find no stored answer), and a second reference set draws
    other seeds again. The seeds used are recorded in the result afterwards."""
    stored = _stored_keys(softmax_task)
    seen = {hashlib.sha256(softmax_ref.inputs(t.index)[0].tobytes()).hexdigest()
            for t in softmax_ref.trials}
    assert len(seen) == len(softmax_ref.trials) and not seen & stored
    with compute_reference(softmax_task) as again:
        assert not {t.seed for t in again.trials} & {t.seed for t in softmax_ref.trials}
    result = verify(SOFTMAX, softmax_task, softmax_ref, function="softmax_kernel")
    assert [t.seed for t in result.trials] == [t.seed for t in softmax_ref.trials]
