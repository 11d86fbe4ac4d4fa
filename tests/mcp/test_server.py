"""`nkibot mcp` driven by the official MCP client over stdio, as an IDE agent drives it."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.tool_name_validation import validate_tool_name

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "fixtures" / "kernels"
TOOLS = {"discover", "convert", "compile", "verify", "simulate", "profile", "lookup", "emit"}
RMSNORM = "examples/rmsnorm.py::RMSNorm"

pytestmark = pytest.mark.slow

SLOW_REFERENCE = '''import time
import torch
from torch import nn


class Slow(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(60)
        return x * 2


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(128, 64)]
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "rmsnorm.py", tmp_path / "examples" / "rmsnorm.py")
    for name in ("relu_ref.py", "relu_ok.py", "copy_input.py", "imports_torch.py"):
        shutil.copy(KERNELS / name, tmp_path / name)
    (tmp_path / "slow.py").write_text(SLOW_REFERENCE)
    return tmp_path


@asynccontextmanager
async def connect(root: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from nkibot.cli import main; main()", "mcp", "--root", str(root)])
    async with Client(params, read_timeout_seconds=300) as client:
        yield client


def payload(result: Any) -> Any:
    """The tool's JSON answer (structured content when the SDK built it, else the text)."""
    assert not result.is_error, result.content[0].text
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error, "expected an error result"
    return str(result.content[0].text)


class TestListing:
    async def test_lists_every_tool_with_a_valid_schema(self, workspace: Path) -> None:
        """All eight tools are listed, with valid names and JSON Schemas and a description."""
        async with connect(workspace) as client:
            listed = (await client.list_tools()).tools
            resources = (await client.list_resources()).resources
        assert {t.name for t in listed} == TOOLS
        for tool in listed:
            assert validate_tool_name(tool.name).is_valid, tool.name
            Draft202012Validator.check_schema(tool.input_schema)
            assert tool.description and len(tool.description) > 20
        convert = next(t for t in listed if t.name == "convert")
        assert convert.input_schema["required"] == ["target"]
        assert {"shapes", "model", "turns", "target_generation"} <= set(
            convert.input_schema["properties"])
        assert any(str(r.uri).startswith("nki://knowledge/matmul") for r in resources)


class TestLocalFlow:
    async def test_discover_convert_verify_profile_emit(self, workspace: Path) -> None:
        """The whole local flow on RMSNorm: each step's answer feeds the next."""
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        async with connect(workspace) as client:
            found = payload(await client.call_tool("discover", {"path": "examples"}))
            [entry] = [c for c in found["candidates"] if c["target"] == RMSNORM]
            assert entry["shapes"] == [{"name": "x", "shape": [4, 100, 512],
                                        "dtype": "float32"}]
            assert entry["shapes_from"] == "get_inputs"

            result = payload(await client.call_tool(
                "convert", {"target": RMSNORM, "model": "lowering", "target_generation": "trn3"},
                progress_callback=on_progress))
            assert result["status"] == "verified", result["reasons"]
            assert result["platform"] == "trn3"
            assert result["hardware"] is False
            assert progress and progress[0][0] == 1.0 and "verified" in (progress[-1][2] or "")

            code = result["kernel"]["source"]
            verified = payload(await client.call_tool(
                "verify", {"code": code, "target": RMSNORM, "trials": 2}))
            assert verified["status"] == "verified"
            assert verified["platform"] == "trn1"  # the host's default: no device here
            assert len({t["seed"] for t in verified["verify"]["trials"]}) >= 2

            profiled = payload(await client.call_tool(
                "profile", {"code": code, "target": RMSNORM}))
            assert profiled["source"] == "simulator estimate"
            assert profiled["hardware"] is False
            assert "simulator" in profiled["measured_on"]

            written = payload(await client.call_tool(
                "emit", {"result": result, "out_dir": "nki_out"}))["written"]
        assert "nki_out/report.md" in written
        kernel_files = [w for w in written if w.endswith("_nki.py")]
        assert kernel_files and (workspace / kernel_files[0]).read_text().count("@nki.jit") == 1
        assert any(w.startswith("nki_out/") and "test_" in w for w in written)

    async def test_verify_refuses_a_cheating_kernel(self, workspace: Path) -> None:
        """A kernel that imports torch, and one that returns its input, are not verified."""
        async with connect(workspace) as client:
            torch_kernel = payload(await client.call_tool("verify", {
                "code": (workspace / "imports_torch.py").read_text(),
                "target": "relu_ref.py::Model"}))
            copier = payload(await client.call_tool("verify", {
                "code": (workspace / "copy_input.py").read_text(),
                "target": "relu_ref.py::Model"}))
            honest = payload(await client.call_tool("verify", {
                "code": (workspace / "relu_ok.py").read_text(),
                "target": "relu_ref.py::Model"}))
        assert torch_kernel["status"] == "failed"
        assert any("torch" in r for r in torch_kernel["reasons"])
        assert copier["status"] != "verified" and copier["reasons"]
        assert honest["status"] == "verified", honest["reasons"]


class TestSimulate:
    async def test_random_and_file_inputs(self, workspace: Path) -> None:
        """Seeded random inputs give statistics; .npy inputs give outputs NumPy agrees with."""
        x = np.linspace(-3, 3, 128 * 64, dtype=np.float32).reshape(128, 64)
        np.save(workspace / "x.npy", x)
        code = (workspace / "relu_ok.py").read_text()
        async with connect(workspace) as client:
            rand = payload(await client.call_tool(
                "simulate", {"code": code, "shapes": ["x=128x64xfloat32"], "seed": 3}))
            files = payload(await client.call_tool(
                "simulate", {"code": code, "inputs": ["x.npy"], "out_dir": "sim_out"}))
        [out] = rand["outputs"]
        assert out["shape"] == [128, 64] and out["dtype"] == "float32"
        assert out["min"] == 0.0 and out["max"] > 0.0 and out["nan"] == 0
        assert files["written"] == ["sim_out/output0.npy"]
        np.testing.assert_array_equal(np.load(workspace / "sim_out" / "output0.npy"),
                                      np.maximum(x, 0))


    async def test_writes_follow_no_planted_link_and_big_shapes_are_refused(
            self, workspace: Path) -> None:
        """Issue 26, class 3: `out_dir` holding a link to a file outside the workspace is
        refused (the file is untouched), and 40000x40000 random inputs (6 GB) are refused
        before anything is allocated; the server keeps answering."""
        outside = workspace.parent / f"{workspace.name}-outside.npy"
        outside.write_bytes(b"precious")
        (workspace / "sim_out").mkdir()
        (workspace / "sim_out" / "output0.npy").symlink_to(outside)
        code = (workspace / "relu_ok.py").read_text()
        async with connect(workspace) as client:
            planted = error_text(await client.call_tool(
                "simulate", {"code": code, "shapes": ["x=128x64xfloat32"],
                             "out_dir": "sim_out"}))
            huge = error_text(await client.call_tool(
                "simulate", {"code": code, "shapes": ["x=40000x40000xfloat32"]}))
            alive = payload(await client.call_tool("lookup", {"topic": "reductions"}))
        assert "follows no link" in planted and outside.read_bytes() == b"precious"
        assert "6104 MiB" in huge and "use smaller shapes" in huge
        assert alive


class TestErrors:
    async def test_bad_input_is_an_error_result_not_a_crash(self, workspace: Path) -> None:
        """Bad paths, traversal, unparsable code and unknown targets say what is wrong."""
        async with connect(workspace) as client:
            outside = error_text(await client.call_tool("discover", {"path": "../.."}))
            missing = error_text(await client.call_tool("discover", {"path": "nope.py"}))
            syntax = error_text(await client.call_tool(
                "verify", {"code": "def broken(:\n", "target": RMSNORM}))
            target = error_text(await client.call_tool(
                "compile", {"code": "import nki\n", "target": "examples/rmsnorm.py"}))
            escape = error_text(await client.call_tool(
                "emit", {"result": {"status": "verified", "target": RMSNORM},
                         "out_dir": "../escape"}))
            generation = error_text(await client.call_tool(
                "convert", {"target": RMSNORM, "target_generation": "trn9"}))
            still_alive = payload(await client.call_tool("lookup", {"topic": "reductions"}))
        assert "outside the workspace" in outside
        assert "does not exist" in missing
        assert "does not parse" in syntax and "line 1" in syntax
        assert "FILE::Name" in target
        assert "outside the workspace" in escape or "conversion result" in escape
        assert "trn9" in generation
        assert not (workspace.parent / "escape").exists()
        assert "reduction" in str(still_alive).lower()


class TestCancellation:
    async def test_cancelling_a_long_convert_frees_the_server(self, workspace: Path) -> None:
        """A convert cancelled by the client ends at once; the server answers the next call."""
        async with connect(workspace) as client:
            started = time.monotonic()
            with anyio.move_on_after(8) as scope:
                await client.call_tool("convert", {"target": "slow.py::Slow",
                                                   "model": "lowering"})
            cancelled_after = time.monotonic() - started
            answer = payload(await client.call_tool("lookup", {"topic": "matmul"}))
            answered_after = time.monotonic() - started
        assert scope.cancelled_caught
        assert cancelled_after < 15
        assert answered_after - cancelled_after < 10
        assert "matmul" in str(answer).lower()


class TestHttp:
    async def test_streamable_http_on_loopback(self, workspace: Path) -> None:
        """`--http PORT` serves the same tools over streamable HTTP, bound to 127.0.0.1."""
        import socket
        import subprocess

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-c", "from nkibot.cli import main; main()", "mcp",
             "--http", str(port), "--root", str(workspace)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    await anyio.sleep(0.3)
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                found = payload(await client.call_tool("discover", {"path": "examples"}))
            listening = listening_addresses(port)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        assert names == TOOLS
        assert any(c["target"] == RMSNORM for c in found["candidates"])
        assert listening == {"127.0.0.1"}


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses a TCP port listens on, read from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        ip_hex, port_hex = local.split(":")
        if int(port_hex, 16) == port and state == "0A":
            found.add(".".join(str(int(ip_hex[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "0"}}}


class TestHttpExposure:
    async def test_non_loopback_bind_needs_the_token_and_a_known_host(
            self, workspace: Path, tmp_path: Path) -> None:
        """Issue 26, class 3: `--host 0.0.0.0` serves nothing without the bearer token,
        checks Host on every request, and says on start-up what is exposed."""
        import socket
        import subprocess

        import httpx

        token = "s3cret-token-for-the-test-0123456789"
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-c", "from nkibot.cli import main; main()", "mcp",
             "--http", str(port), "--host", "0.0.0.0", "--token-file", str(token_file),
             "--root", str(workspace)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"accept": "application/json, text/event-stream",
                   "content-type": "application/json"}
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    await anyio.sleep(0.3)
            async with httpx.AsyncClient(timeout=30) as http:
                anonymous = await http.post(url, json=INIT, headers=headers)
                wrong = await http.post(url, json=INIT, headers={
                    **headers, "authorization": "Bearer not-the-token-at-all-00000"})
                rebound = await http.post(url, json=INIT, headers={
                    **headers, "authorization": f"Bearer {token}",
                    "host": f"evil.example:{port}"})
                allowed = await http.post(url, json=INIT, headers={
                    **headers, "authorization": f"Bearer {token}"})
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
        assert (anonymous.status_code, wrong.status_code) == (401, 401)
        assert rebound.status_code in (400, 403, 421), rebound.status_code
        assert allowed.status_code == 200, allowed.text
        banner = err.decode()
        assert "bearer token required" in banner and "every network" in banner
        assert token not in banner
