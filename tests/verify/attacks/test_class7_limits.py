"""Class 7: limits that do not hold (unbounded output, grandchildren holding the pipes,
memory spread over forks, processes outliving a run, writable verifier code)."""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import nkibot
from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet
from nkibot.verify.sandbox import KERNEL, STDERR_CAP, STDOUT_CAP, Confinement, run_sandboxed
from tests.verify.attacks.conftest import PROBE, RELU, findings, verify

PRINT_256_MIB = ("import os\nblock = b'x' * (1 << 20)\nfor _ in range(256):\n"
                 "    os.write(1, block)\n    os.write(2, block)\n")


def test_huge_output_is_capped_in_the_parent(full_isolation: object) -> None:
    """256 MiB on each of stdout and stderr cost the parent a capped head and tail."""
    tracemalloc.start()
    try:
        out = run_sandboxed([sys.executable, "-I", "-c", PRINT_256_MIB], timeout_s=120,
                            confinement=KERNEL)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.ok, out.reason()
    assert len(out.stdout) < sum(STDOUT_CAP) + 200 and b"bytes dropped" in out.stdout
    assert len(out.stderr) < sum(STDERR_CAP) + 200 and b"bytes dropped" in out.stderr
    assert peak < 32 * 1024 * 1024, f"the parent held {peak / 2**20:.0f} MiB"


def test_kernel_printing_256_mib_still_gets_a_verdict(relu_task: Task,
                                                      relu_ref: ReferenceSet) -> None:
    """The kernel's prints do not reach the verdict; the honest output still verifies."""
    attack = RELU.replace("    return out\n", "    import sys\n"
                          "    sys.stderr.write('y' * (256 << 20))\n    return out\n")
    result = verify(attack, relu_task, relu_ref)
    assert result.passed, result.reasons
    assert len(result.log) < 1000


GRANDCHILD = '''
import os, sys, time
beat = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:  # holds stdout/stderr open and keeps writing
            with open(beat, "a") as handle:
                handle.write(".")
            time.sleep(0.05)
    os._exit(0)
time.sleep(float(sys.argv[2]))
'''


def _still_beating(beat: Path) -> bool:
    before = beat.stat().st_size
    time.sleep(0.6)
    return beat.stat().st_size != before


def test_setsid_grandchild_dies_with_the_run(full_isolation: object, tmp_path: Path) -> None:
    """Even where forks are allowed (the Neuron compiler's profile), a setsid grandchild
    holding the pipes neither delays the time-out nor outlives the run."""
    beat = tmp_path / "beat"
    processes = Confinement(writable=(tmp_path,), processes=True)
    started = time.monotonic()
    out = run_sandboxed([sys.executable, "-I", "-c", GRANDCHILD, str(beat), "60"],
                        timeout_s=3, confinement=processes)
    assert out.timed_out and time.monotonic() - started < 9
    assert beat.exists() and not _still_beating(beat)
    beat.unlink()
    out = run_sandboxed([sys.executable, "-I", "-c", GRANDCHILD, str(beat), "0.5"],
                        timeout_s=30, confinement=processes)
    assert out.ok and not out.timed_out and out.seconds < 10
    assert not _still_beating(beat)


def test_kernel_cannot_fork_or_exec(relu_task: Task, relu_ref: ReferenceSet) -> None:
    """No fork, no exec, no new session leader's children: the kernel stays one process."""
    attack = PROBE + '''
import os, subprocess
attempt("fork", os.fork)
attempt("popen", lambda: subprocess.Popen(["/usr/bin/true"]).wait())
attempt("exec", lambda: os.execv(sys.executable, [sys.executable, "-c", "0"]))
import sys
report()
''' + RELU
    attack = attack.replace("import os, subprocess", "import os, subprocess, sys")
    found = findings(verify(attack, relu_task, relu_ref))
    assert found == {"fork": "refused: PermissionError", "popen": "refused: PermissionError",
                     "exec": "refused: PermissionError"}, found


def test_memory_is_bounded_across_threads(relu_task: Task, relu_ref: ReferenceSet) -> None:
    """Three 1.5 GiB allocations against a 4 GiB limit: forks are refused, and threads
    share one address space, so at most two succeed."""
    attack = PROBE + '''
import threading
def grab():
    block = bytearray(1536 << 20)
    return len(block)
got = []
def worker():
    try:
        got.append(bytearray(1536 << 20))
    except MemoryError:
        pass
threads = [threading.Thread(target=worker) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
found["held"] = f"ok: {len(got)}"
report()
''' + RELU
    found = findings(verify(attack, relu_task, relu_ref, memory_mb=4096))
    assert found["held"] in ("ok: 0", "ok: 1", "ok: 2"), found


def test_verifier_code_is_read_only(relu_task: Task, relu_ref: ReferenceSet) -> None:
    """nkibot, NumPy and the interpreter's own library are read-only to the kernel."""
    import os

    import numpy

    targets = {"nkibot": Path(nkibot.__file__).parent / "verify" / "judge.py",
               "numpy": Path(numpy.__file__), "stdlib": Path(os.__file__)}
    attack = PROBE + "import os\n" + "".join(
        f'attempt("{name}", lambda: open("{path}", "a").write("#"))\n'
        f'attempt("{name}_ro", lambda: os.statvfs("{path}").f_flag & os.ST_RDONLY)\n'
        for name, path in targets.items()) + "report()\n" + RELU
    found = findings(verify(attack, relu_task, relu_ref))
    for name in targets:  # the uid may not write them, and the mount is read-only anyway
        assert found[name] in ("refused: PermissionError", "refused: OSError"), found
        assert found[f"{name}_ro"] == "ok: 1", found
