"""pytest fixtures for the Anthropic Messages double (filled in by the agent-loop work)."""
