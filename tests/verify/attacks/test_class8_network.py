"""Class 8: the network namespace leaks (filesystem UNIX sockets, setns back into the
parent's namespaces). The kernel has no socket at all and cannot change namespaces."""

from __future__ import annotations

import socket
from pathlib import Path

from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet
from tests.verify.attacks.conftest import PROBE, RELU, findings, verify


def test_filesystem_unix_socket_in_view_does_not_connect(relu_task: Task,
                                                         relu_ref: ReferenceSet) -> None:
    """A host UNIX socket placed where the kernel can see it gets no connection."""
    path = relu_ref.root / "inputs" / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(1)
    server.settimeout(0.5)
    try:
        attack = PROBE + f'''
import os, socket
attempt("visible", lambda: os.path.exists("{path}") or 1 / 0)
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("{path}")
    s.sendall(b"stolen")
    return "connected"
attempt("unix", connect)
attempt("pair", socket.socketpair)
attempt("inet", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
report()
''' + RELU
        found = findings(verify(attack, relu_task, relu_ref))
        try:
            conn, _ = server.accept()
            conn.close()
            connected = True
        except TimeoutError:
            connected = False
    finally:
        server.close()
        path.unlink()
    assert not connected
    assert found == {"visible": "ok: True", "unix": "refused: PermissionError",
                     "pair": "refused: PermissionError", "inet": "refused: PermissionError"}, found


def test_no_way_back_into_the_parents_namespaces(relu_task: Task,
                                                 relu_ref: ReferenceSet) -> None:
    """setns, unshare and mount are refused; the host's /proc namespaces are not in view."""
    attack = PROBE + '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "done"
def setns(path):
    fd = os.open(path, os.O_RDONLY)
    return call(libc.setns(fd, 0))
attempt("setns_own", lambda: setns("/proc/1/ns/net"))
attempt("unshare", lambda: call(libc.unshare(0x10000000 | 0x40000000)))
attempt("mount", lambda: call(libc.mount(b"none", b"/", b"tmpfs", 0, None)))
attempt("ptrace", lambda: call(libc.ptrace(16, 1, None, None)))
attempt("host_ns", lambda: os.readlink("/proc/%d/ns/net" % (os.getpid() + 100000)))
report()
''' + RELU
    found = findings(verify(attack, relu_task, relu_ref))
    refused = {k: v for k, v in found.items() if k != "host_ns"}
    assert all(v == "refused: PermissionError" for v in refused.values()), found
    assert found["host_ns"] == "refused: FileNotFoundError"
    assert Path("/proc/self/ns/net").exists()  # the test's own view is the host's
