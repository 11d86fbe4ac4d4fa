"""Each IDE descriptor we ship launches `nkibot mcp` and lists its tools.

The descriptors are read as their IDE reads them (command, args, env; placeholders
expanded; a Codex plugin's `mcpServers` path followed), then started with the official MCP
client over stdio, as the IDE would start them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.mcp.test_server import ROOT, TOOLS

pytestmark = pytest.mark.slow
#: Path of each descriptor in the repository, and how its IDE names the project folder.
DESCRIPTORS = {
    ".mcp.json": None,
    ".claude-plugin/plugin.json": "${CLAUDE_PROJECT_DIR}",
    ".codex-plugin/plugin.json": None,
    ".kiro/settings/mcp.json": None,
}
SKILL = ROOT / "skills" / "nki-kernel" / "SKILL.md"


def server_config(descriptor: str) -> dict[str, Any]:
    """The `nkibot` server entry, following a plugin's path to its MCP file."""
    data = json.loads((ROOT / descriptor).read_text(encoding="utf-8"))
    servers = data["mcpServers"]
    if isinstance(servers, str):  # Codex: a path relative to the plugin root
        servers = json.loads((ROOT / servers).read_text(encoding="utf-8"))["mcpServers"]
    return dict(servers["nkibot"])


@pytest.mark.parametrize("descriptor", sorted(DESCRIPTORS))
async def test_descriptor_launches_nkibot_mcp_and_lists_the_tools(descriptor: str,
                                                                  tmp_path: Path) -> None:
    config = server_config(descriptor)
    command = shutil.which(config["command"])
    assert command is not None, f"{config['command']} is not on PATH"
    placeholder = DESCRIPTORS[descriptor]
    args = [str(tmp_path) if placeholder and a == placeholder else a for a in config["args"]]
    assert args[0] == "mcp" and not any(re.search(r"\$\{", a) for a in args), args
    env = {**os.environ, **config.get("env", {}),
           # the console script imports this checkout's nkibot, whichever is installed
           "PYTHONPATH": str(ROOT)}
    params = StdioServerParameters(command=command, args=args, env=env, cwd=tmp_path)
    async with Client(params, read_timeout_seconds=120) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
    assert listed == TOOLS


def test_codex_plugin_bundles_the_skill() -> None:
    manifest = json.loads((ROOT / ".codex-plugin" / "plugin.json").read_text())
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", manifest["name"])
    assert (ROOT / manifest["skills"] / "nki-kernel" / "SKILL.md").is_file()


def test_skill_teaches_the_workflow_with_our_tools() -> None:
    """SKILL.md has its front matter and names each step's tool and the knowledge base."""
    text = SKILL.read_text(encoding="utf-8")
    front = re.match(r"---\nname: (\S+)\ndescription: (.+?)\n---\n", text, re.S)
    assert front is not None and front.group(1) == "nki-kernel"
    assert len(front.group(2)) <= 1024
    for tool in ("discover", "convert", "verify", "profile", "emit", "lookup"):
        assert f"`{tool}(" in text, tool
    assert "nki://knowledge/" in text and "nkibot/convert/knowledge/" in text
    steering = (ROOT / ".kiro" / "steering" / "nki-kernels.md").read_text()
    assert steering.startswith("---\ninclusion:") and "skills/nki-kernel/SKILL.md" in steering
