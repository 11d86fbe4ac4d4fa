"""Project-wide pytest options: `--backend=sim|neuron` selects the kernel backend."""

from __future__ import annotations

import shutil

import pytest

pytest_plugins = ["tests.fakes.github_fixtures", "tests.fakes.anthropic_fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="store",
        default="sim",
        choices=("sim", "neuron"),
        help="kernel backend for conformance tests: sim (CPU simulator) or neuron (Trn1)",
    )


def neuron_device_present() -> bool:
    """A NeuronCore is usable when the driver's device nodes and neuron-ls exist."""
    import glob

    return bool(glob.glob("/dev/neuron*")) and shutil.which("neuron-ls") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the linters (mypy --strict over nkibot/ is the longest test, minutes with a cold
    # cache) start first, so that under pytest-xdist (-n auto) they run beside the rest
    # instead of holding one worker alone at the end
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_quality.py"))
    if neuron_device_present():
        return
    skip = pytest.mark.skip(
        reason="needs a Trn1 NeuronCore and the Neuron SDK: no /dev/neuron* or neuron-ls here"
    )
    for item in items:
        if "neuron" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kernel_backend_name(request: pytest.FixtureRequest) -> str:
    name = str(request.config.getoption("--backend"))
    if name == "neuron" and not neuron_device_present():
        pytest.skip("--backend=neuron needs a Trn1 NeuronCore; none found on this host")
    return name
