"""pytest fixtures for the Anthropic Messages double."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.anthropic import AnthropicDouble, build_app
from tests.fakes.server import ServerThread


@pytest.fixture
def anthropic_double() -> Iterator[AnthropicDouble]:
    """A running Messages double; fails the test on an invalid request or a failed check."""
    double = AnthropicDouble()
    with ServerThread(build_app(double)) as url:
        double.base_url = url
        yield double
    assert not [e for e in double.errors if e.startswith(("request check", "invalid request"))], (
        double.errors)
