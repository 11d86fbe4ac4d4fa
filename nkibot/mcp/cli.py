"""`nkibot mcp`: serve nkibot's tools to IDE agents over stdio (default) or streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def mcp(
    http: Annotated[int | None, typer.Option(
        "--http", help="serve streamable HTTP on this port instead of stdio")] = None,
    host: Annotated[str, typer.Option(help="HTTP bind address (loopback by default)")
                    ] = "127.0.0.1",
    root: Annotated[Path, typer.Option(help="workspace root: tools read and write only "
                                       "inside it")] = Path(),
    token_file: Annotated[Path | None, typer.Option(
        help="HTTP: require this bearer token (first line of the file); a bind other than "
             "loopback without one gets a generated token, printed on stderr")] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        help="HTTP: another Host name clients use to reach the server (repeatable)")] = None,
) -> None:
    """Serve discover, convert, compile, verify, simulate, profile, lookup and emit over MCP."""
    from nkibot.config.settings import Settings
    from nkibot.logging import configure
    from nkibot.mcp.server import build_server
    from nkibot.mcp.tools import Tools, checked_generation
    from nkibot.mcp.workspace import ToolInputError, Workspace

    # stdout is the protocol: logs go to stderr, warnings only.
    configure("warning", json=False)
    try:
        workspace = Workspace.at(root)
    except ToolInputError as exc:
        typer.echo(f"nkibot mcp: {exc}", err=True)
        raise typer.Exit(2) from exc
    settings = Settings()
    try:
        platform = checked_generation(None, settings.target)
    except ToolInputError as exc:
        typer.echo(f"nkibot mcp: {exc}", err=True)
        raise typer.Exit(2) from exc
    server = build_server(Tools(workspace=workspace, settings=settings, platform=platform))
    if http is None:
        server.run("stdio")
    else:
        _serve_http(server, host, http, token_file, tuple(allow_host or ()))


def _serve_http(server: Any, host: str, port: int, token_file: Path | None,
                allow: tuple[str, ...]) -> None:
    import uvicorn

    from nkibot.mcp.http import BearerGuard, banner, is_loopback, load_token, security

    guard = security(host, port, allow)
    app = server.streamable_http_app(transport_security=guard, host=host)
    token_from: str | None = None
    if token_file is not None or not is_loopback(host):
        try:
            token, token_from = load_token(token_file)
        except (OSError, ValueError) as exc:
            typer.echo(f"nkibot mcp: cannot read the token: {exc}", err=True)
            raise typer.Exit(2) from exc
        if token_file is None:
            typer.echo(f"nkibot mcp: bearer token (generated for this run): {token}", err=True)
        app = BearerGuard(app, token)
    typer.echo(banner(host, port, guard, token_from), err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
