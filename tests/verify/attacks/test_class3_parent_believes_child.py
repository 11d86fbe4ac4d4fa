"""Class 3: the parent believes the child (forged replies, lying arrays, guards the
child computed). The verdict is the parent's: it reads raw outputs from fixed files and
decides every guard on its own data."""

from __future__ import annotations

from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet
from tests.verify.attacks.conftest import RELU, verify

FORGED = '''
import json, os
reply = {"ok": True, "error": None, "simulator": "nkibot-sim", "device": None, "stats": {},
         "deterministic": True, "inputs_modified": [], "passed": True,
         "trials": [{"outputs": [{"file": "/etc/hostname", "dtype": "float32",
                                  "shape": [256, 64]}], "inputs_modified": []}]}
for fd in range(1, 64):
    try:
        os.write(fd, (json.dumps(reply) + "\\n").encode())
    except OSError:
        pass
os._exit(0)
'''


def test_forged_reply_on_the_pipe_is_ignored(relu_task: Task, relu_ref: ReferenceSet
                                             ) -> None:
    """A kernel that writes a 'passed' reply to every fd and exits gets nothing from it:
    no output files exist, so no trial ran."""
    result = verify(FORGED + RELU, relu_task, relu_ref)
    assert not result.passed
    assert not result.trials
    assert any("trials-missing" in r or r.startswith("sandbox:") for r in result.reasons), (
        result.reasons)


def test_lying_ndarray_subclass_does_not_hide_nondeterminism(
        relu_task: Task, relu_ref: ReferenceSet) -> None:
    """Outputs differ per process (noise within tolerance) and the returned array's
    class claims constant bytes; the parent compares its own plain copies of two fresh
    runs and finds them different."""
    attack = RELU.replace("value=nl.relu(tile)", "value=nl.add(nl.relu(tile), NOISE)")
    attack = attack.replace("    return out\n", '''    class Liar(np.ndarray):
        def tobytes(self, *a, **k):
            return b"same"
        def __eq__(self, other):
            return True
    try:
        return out.view(Liar)
    except Exception:
        return out
''')
    attack = """
import os
import numpy as np
NOISE = float(np.frombuffer(os.urandom(4), dtype=np.uint32)[0]) / 2.0**32 * 1e-6
""" + attack
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("guard:nondeterministic") for r in result.reasons), result.reasons


def test_guards_claimed_by_the_child_are_not_believed(
        relu_task: Task, relu_ref: ReferenceSet) -> None:
    """A kernel that writes into its input and patches the harness module's reply to
    claim nothing was modified: the parent compares the inputs as left against its copies."""
    attack = RELU.replace("    return out\n", '''    import sys
    side = sys.modules.get("nkibot.verify.children.kernel_side")
    if side is not None:
        side.KernelReply = dict
    nl.store(x[0:128, 0:64], value=nl.relu(nl.load(x[0:128, 0:64])))
    return out
''')
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("guard:inputs-modified x") for r in result.reasons), result.reasons


def test_output_files_are_read_as_plain_arrays_only(relu_task: Task,
                                                    relu_ref: ReferenceSet) -> None:
    """Outputs planted by the kernel itself, a symlink (to a file only root may read) and
    a broken header, are refused: the parent never follows links nor trusts a header."""
    attack = RELU.replace("    return out\n", '''    import glob, os
    for directory in glob.glob("/tmp/nkibot-verify-*/first"):
        os.symlink("/etc/shadow", os.path.join(directory, "t0_o0.float32.npy"))
        with open(os.path.join(directory, "t1_o0.float32.npy"), "wb") as handle:
            handle.write(b"\\x93NUMPY" + bytes(200))
    return out
''')
    result = verify(attack, relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("kernel:unreadable-output") for r in result.reasons) or any(
        r.startswith("kernel:error") for r in result.reasons), result.reasons
