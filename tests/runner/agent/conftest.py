"""Fixtures for the agent-loop tests (defined in tests/runner/agent/episode.py)."""

from tests.runner.agent.episode import claude_settings, sim_backend, sim_task

__all__ = ["claude_settings", "sim_backend", "sim_task"]
