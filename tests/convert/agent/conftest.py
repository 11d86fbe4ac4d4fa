"""Fixtures for the agent-loop tests (defined in tests/convert/agent/episode.py)."""

from tests.convert.agent.episode import claude_settings, sim_backend, sim_task

__all__ = ["claude_settings", "sim_backend", "sim_task"]
