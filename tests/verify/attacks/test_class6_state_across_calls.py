"""Class 6: state across calls (a mutable-default counter, a module-level cache that
replays answers). Each verification runs every trial in two fresh processes, each in its
own secret shuffled order, and compares them: state shows."""

from __future__ import annotations

from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet
from tests.verify.attacks.conftest import RELU, verify


def test_counter_in_a_mutable_default(relu_task: Task, relu_ref: ReferenceSet) -> None:
    """Correct for the first three calls, wrong after: trials run later in a process fail.

    Wrong from the fourth call, so most of each process's trials are wrong whatever the
    secret order: a counter that broke only the ninth call was caught by the
    nondeterminism guard instead when that call happened to be a repeat trial.
    """
    attack = RELU.replace("def relu_kernel(x):", "def relu_kernel(x, calls=[]):").replace(
        "value=nl.relu(tile)", "value=nl.relu(tile) if len(calls) < 3 else tile").replace(
        "    return out\n", "    calls.append(1)\n    return out\n")
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("numeric:mismatch") for r in result.reasons), result.reasons


def test_module_level_cache_replays_the_first_answer(relu_task: Task,
                                                     relu_ref: ReferenceSet) -> None:
    """The first call's output is returned again for every later call: refused by the
    simulator (a result must be allocated in this launch) or else by the numbers."""
    attack = "CACHE = {}\n" + RELU.replace(
        "    out = nl.ndarray(", "    if 'out' in CACHE:\n        return CACHE['out']\n"
        "    out = nl.ndarray(").replace("    return out\n", "    CACHE['out'] = out\n"
                                         "    return out\n")
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith(("guard:outputs-constant", "guard:nondeterministic",
                             "numeric:mismatch", "kernel:error result-illegal"))
               for r in result.reasons), result.reasons


def test_state_that_differs_per_process_is_nondeterminism(relu_task: Task,
                                                          relu_ref: ReferenceSet) -> None:
    """A per-process secret (drawn at import) kept in module state changes the outputs
    a little from one process to the next: the second fresh run disagrees."""
    attack = ("import os\n"
              "STATE = {'eps': (int.from_bytes(os.urandom(8), 'big') % 10**6 + 1) * 1e-12}\n"
              + RELU.replace("value=nl.relu(tile)", "value=nl.add(nl.relu(tile), "
                             "STATE['eps'])"))
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("guard:nondeterministic") for r in result.reasons), result.reasons
