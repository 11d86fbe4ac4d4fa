"""`nkibot mcp`: the conversion, verification and simulator tools for coding agents (MCP)."""
