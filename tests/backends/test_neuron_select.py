"""select_backend: sim, neuron, or auto by what the host has."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.backends.base import KernelBackend
from nkibot.backends.neuron.backend import NeuronBackend
from nkibot.backends.select import BackendUnavailable, select_backend


class StubSim:
    name = "sim"
    is_hardware = False
    platform = "trn1"

    def compile(self, src: object, task: object) -> object:
        raise NotImplementedError

    def verify(self, src: object, task: object, reference: object) -> object:
        raise NotImplementedError

    def profile(self, src: object, task: object) -> object:
        raise NotImplementedError


def _sim() -> KernelBackend:
    return StubSim()  # type: ignore[return-value]


class TestSelectBackend:
    def test_auto_without_hardware_is_sim(self) -> None:
        """auto falls back to the simulator where the SDK or device is missing."""
        backend = select_backend("auto", problems=lambda: ["no device"], sim_factory=_sim)
        assert backend.name == "sim" and not backend.is_hardware

    def test_auto_with_hardware_is_neuron_on_the_core(self, tmp_path: Path) -> None:
        """auto picks neuron where everything is present, pinned to the given core."""
        backend = select_backend("auto", core_id=4, compile_timeout_s=60, cache_dir=tmp_path,
                                 problems=list, sim_factory=_sim)
        assert isinstance(backend, NeuronBackend) and isinstance(backend, KernelBackend)
        assert backend.is_hardware and backend.core_id == 4
        assert backend.compile_timeout_s == 60 and backend.cache.root == tmp_path

    def test_neuron_without_hardware_says_why(self) -> None:
        """Asking for neuron where it cannot run is an error listing what is missing."""
        with pytest.raises(BackendUnavailable, match="no device; no nki"):
            select_backend("neuron", problems=lambda: ["no device", "no nki"], sim_factory=_sim)

    def test_sim_never_probes_hardware(self) -> None:
        """sim is the simulator even on a Trn1 host."""
        def boom() -> list[str]:
            raise AssertionError("probed")

        assert select_backend("sim", problems=boom, sim_factory=_sim).name == "sim"

    def test_this_host_cannot_run_neuron(self) -> None:
        """On this CI host (no device, no SDK) neuron is unavailable."""
        with pytest.raises(BackendUnavailable):
            select_backend("neuron", sim_factory=_sim)


class TestGeneration:
    def test_neuron_backend_takes_the_device_generation(self, tmp_path: Path) -> None:
        """On a Trn2 host the neuron backend compiles for trn2 and says Trn2 hardware."""
        from nkibot.backends.neuron.backend import device_env, measured_on

        backend = select_backend("neuron", problems=list, cache_dir=tmp_path,
                                 platform="trn1", device_platform=lambda: "trn2")
        assert isinstance(backend, NeuronBackend) and backend.platform == "trn2"
        env = device_env(0, tmp_path, platform=backend.platform)
        assert env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
        assert measured_on("trn2") == "Trn2 hardware"

    def test_without_a_device_answer_the_request_stands(self, tmp_path: Path) -> None:
        backend = select_backend("neuron", problems=list, cache_dir=tmp_path,
                                 platform="trn3", device_platform=lambda: None)
        assert isinstance(backend, NeuronBackend) and backend.platform == "trn3"

    def test_sim_backend_gets_the_requested_generation(self) -> None:
        from nkibot.backends.sim import SimBackend

        backend = select_backend("sim", platform="trn2")
        assert isinstance(backend, SimBackend) and backend.platform == "trn2"
