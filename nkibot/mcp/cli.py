"""`nkibot mcp`: serve nkibot's tools to IDE agents over stdio (default) or streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def mcp(
    http: Annotated[int | None, typer.Option(
        "--http", help="serve streamable HTTP on this port instead of stdio")] = None,
    host: Annotated[str, typer.Option(help="HTTP bind address (loopback by default)")
                    ] = "127.0.0.1",
    root: Annotated[Path, typer.Option(help="workspace root: tools read and write only "
                                       "inside it")] = Path(),
) -> None:
    """Serve discover, convert, compile, verify, simulate, profile, lookup and emit over MCP."""
    from nkibot.config.settings import Settings
    from nkibot.logging import configure
    from nkibot.mcp.server import build_server
    from nkibot.mcp.tools import Tools
    from nkibot.mcp.workspace import ToolInputError, Workspace

    # stdout is the protocol: logs go to stderr, warnings only.
    configure("warning", json=False)
    try:
        workspace = Workspace.at(root)
    except ToolInputError as exc:
        typer.echo(f"nkibot mcp: {exc}", err=True)
        raise typer.Exit(2) from exc
    server = build_server(Tools(workspace=workspace, settings=Settings()))
    if http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=http)
