"""The sandbox runs untrusted Python without credentials, within limits, and never raises."""

from __future__ import annotations

import sys

import pytest

from nkibot.verify.sandbox import network_isolation_available, python_module_argv, run_sandboxed


class TestRunSandboxed:
    def test_child_environment_has_no_credentials(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Secrets in the parent's environment never reach the child."""
        monkeypatch.setenv("GITHUB_TOKEN", "ghs_secretsecretsecretsecret")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "awssecret")
        monkeypatch.setenv("NKIBOT_WEBHOOK_SECRET", "hook")
        code = "import os, json; print(json.dumps(dict(os.environ)))"
        out = run_sandboxed([sys.executable, "-c", code], timeout_s=30)
        assert out.ok, out.stderr
        text = out.stdout.decode()
        for leaked in ("ghs_secret", "sk-ant-secret", "awssecret", "hook", "NKIBOT_"):
            assert leaked not in text

    def test_working_directory_is_fresh_and_private(self) -> None:
        """Each child starts in an empty temporary directory."""
        code = "import os; print(os.listdir('.')); print(os.getcwd())"
        first = run_sandboxed([sys.executable, "-c", code], timeout_s=30)
        second = run_sandboxed([sys.executable, "-c", code], timeout_s=30)
        assert first.stdout.splitlines()[0] == b"[]"
        assert first.stdout.splitlines()[1] != second.stdout.splitlines()[1]

    def test_hang_is_killed_at_the_wall_timeout(self) -> None:
        """A child that sleeps forever is killed and reported as a timeout."""
        out = run_sandboxed([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=1)
        assert out.timed_out and not out.ok
        assert "timed out" in out.reason()

    def test_segfault_is_reported_by_name(self) -> None:
        """A child killed by SIGSEGV yields a failed outcome naming the segfault."""
        code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
        out = run_sandboxed([sys.executable, "-c", code], timeout_s=30)
        assert not out.ok
        assert "segmentation fault" in out.reason()

    def test_memory_limit_stops_a_hungry_child(self) -> None:
        """Allocating past RLIMIT_AS fails in the child, not in the parent."""
        code = "x = bytearray(4 * 1024 ** 3)"
        out = run_sandboxed([sys.executable, "-c", code], timeout_s=30, memory_mb=1024)
        assert not out.ok
        assert "memory" in out.reason().lower()

    def test_network_is_removed_where_the_host_permits(self) -> None:
        """With network isolation available, the child cannot open a socket to the outside."""
        if not network_isolation_available():
            pytest.skip("unshare -n is not permitted on this host; isolation reports it")
        code = "import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)"
        out = run_sandboxed([sys.executable, "-c", code], timeout_s=30)
        assert "netns" in out.isolation
        assert not out.ok

    def test_isolated_python_module_runs(self) -> None:
        """python_module_argv runs a module in isolated mode and passes stdin through."""
        out = run_sandboxed(python_module_argv("json.tool"), b'{"a": 1}', timeout_s=30)
        assert out.ok
        assert b'"a": 1' in out.stdout
