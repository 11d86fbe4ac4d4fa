"""Issue 26, classes 1 and 2: what a kernel child leaves in its output directory. Each
attack is an honest ReLU that also plants something there, through the real sandboxed
verifier: the verdict fails and names the cause, never an uncaught exception, and a child
cannot fill the disk through the directory the parent reads."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from nkibot.task import Task
from nkibot.verify import sandbox
from nkibot.verify.protocol import MAX_ENTRIES, BadArrayFile, read_outputs
from nkibot.verify.reference import ReferenceSet
from tests.verify.attacks.conftest import RELU, verify

#: Spliced before the kernel's return: `plant(directory)` runs with the run's output
#: directory, found where the child keeps it (a local of its trial loop).
PLANT = '''
def _out_dir():
    import sys
    frame = sys._getframe()
    while frame is not None:
        if "out_dir" in frame.f_locals:
            return str(frame.f_locals["out_dir"])
        frame = frame.f_back
    raise RuntimeError("no out_dir")

'''


def attack(body: str) -> str:
    """RELU with `body` (indented for the kernel, `d` the output directory) run first."""
    lines = "".join(f"    {line}\n" for line in body.strip().splitlines())
    return PLANT + RELU.replace("    return out\n", "    d = _out_dir()\n" + lines +
                                "    return out\n")


HUGE_HEADER = '''
import os
from numpy.lib import format as f
with open(os.path.join(d, "t0_o1.float32.npy"), "wb") as h:
    f.write_array_header_1_0(h, {"descr": "<f4", "fortran_order": False,
                                 "shape": (10 ** 12,)})
    h.write(bytes(64))
'''
PLANTS = {
    # A 100-byte file whose header declares a 4 TB array: refused, not allocated.
    "huge declared shape": (HUGE_HEADER, "declares shape [1000000000000]"),
    "fifo": ('import os\nos.mkfifo(os.path.join(d, "t0_o1.float32.npy"))',
             "not a regular file"),
    "symlink": ('import os\nos.symlink("/etc/passwd", os.path.join(d, "t0_o1.float32.npy"))',
                "Too many levels of symbolic links"),
    "pickle": ('import numpy, os\nnumpy.save(os.path.join(d, "t0_o1.float32.npy"), '
               'numpy.array([{}], dtype=object), allow_pickle=True)', "holds object"),
    "wrong dtype": ('import numpy, os\nnumpy.save(os.path.join(d, "t0_o1.float32.npy"), '
                    'numpy.zeros(4))', "holds float64, not float32"),
    "oversized header": ('import os\nwith open(os.path.join(d, "t0_o1.float32.npy"), "wb") '
                         'as h:\n    h.write(b"\\x93NUMPY\\x02\\x00" + (20000).to_bytes(4, '
                         '"little") + b" " * 20000)', "not a .npy array"),
    "5000 empty files": ('import os\nfor i in range(5000):\n'
                         '    open(os.path.join(d, f"junk{i}"), "w").close()',
                         f"more than {MAX_ENTRIES} entries"),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_planted_output_ends_in_a_failed_verdict_naming_it(
        name: str, relu_task: Task, relu_ref: ReferenceSet) -> None:
    body, cause = PLANTS[name]
    result = verify(attack(body), relu_task, relu_ref)
    assert not result.passed
    assert any(r.startswith("kernel:unreadable-output") and cause in r
               for r in result.reasons), result.reasons


def test_writing_gigabytes_to_the_output_directory_is_stopped(
        relu_task: Task, relu_ref: ReferenceSet) -> None:
    """1 GiB in 16 MiB files (each under RLIMIT_FSIZE, none an output's name): the
    sandbox watches the directory and kills the child past the run's limit (a few MiB
    for this ReLU), and the verdict says so."""
    body = ('import os\nblock = bytes(16 << 20)\nfor i in range(64):\n'
            '    with open(os.path.join(d, f"fill{i}"), "wb") as h:\n'
            '        h.write(block)')
    started = time.monotonic()
    result = verify(attack(body), relu_task, relu_ref)
    assert not result.passed
    assert any("wrote more than" in r and "output directories" in r
               for r in result.reasons), result.reasons
    assert time.monotonic() - started < 60


def test_the_parent_refuses_a_directory_over_its_total(tmp_path: Path) -> None:
    """Files each under the per-file cap, more than the directory's total: refused before
    any is read (the parent's own bound, whatever the sandbox did)."""
    for i in range(8):
        np.save(tmp_path / f"t{i}_o0.float32.npy", np.zeros(1024, np.float32))
    assert len(read_outputs(tmp_path, 8, max_bytes=8192, max_total=8 * 8192)) == 8
    with pytest.raises(BadArrayFile, match="more than 16384 bytes in its output directory"):
        read_outputs(tmp_path, 8, max_bytes=8192, max_total=16384)


def test_over_limit_counts_files_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").write_bytes(bytes(5000))
    assert sandbox.over_limit((tmp_path,), 10_000) is None
    assert "wrote more than" in str(sandbox.over_limit((tmp_path,), 4000))
