"""Pick the kernel backend: `sim` (CPU simulator), `neuron` (Trn1), or `auto`.

`auto` picks neuron where a Neuron device, the official `nki` package and neuronx-cc
are all present, and the simulator everywhere else. Asking for `neuron` where it cannot
run is an error that says what is missing, never a silent fall-back to the simulator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal, cast

from nkibot.backends.base import KernelBackend
from nkibot.backends.neuron import devices
from nkibot.config.platform import resolve_platform

BackendName = Literal["auto", "sim", "neuron"]


def host_platform(requested: str | None, setting: str | None,
                  device: Callable[[], str | None] = devices.device_generation) -> str:
    """The generation to check for here: the request, the setting, this host's device, trn1."""
    if requested or setting:
        return resolve_platform(requested, setting, None)
    return resolve_platform(None, None, device())


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this host."""


def _sim_backend(platform: str = "trn1") -> KernelBackend:
    # Imported lazily: the simulator pulls in NumPy-heavy modules the CLI may not need.
    module = importlib.import_module("nkibot.backends.sim")
    return cast(KernelBackend, module.SimBackend(platform=platform))


def select_backend(
    name: BackendName,
    *,
    core_id: int | None = None,
    compile_timeout_s: float | None = None,
    cache_dir: Path | None = None,
    problems: Callable[[], list[str]] = devices.hardware_problems,
    sim_factory: Callable[[], KernelBackend] | None = None,
    platform: str = "trn1",
    device_platform: Callable[[], str | None] = devices.device_generation,
) -> KernelBackend:
    """The backend for `name`; `core_id` pins the neuron backend to one NeuronCore.

    `platform` is the Trainium generation the simulator checks for (trn1/trn2/trn3); the
    neuron backend checks on the device it runs on.
    """
    make_sim = sim_factory or (lambda: _sim_backend(platform))
    if name == "sim":
        return make_sim()
    missing = problems()
    if name == "neuron" and missing:
        raise BackendUnavailable("the neuron backend cannot run here: " + "; ".join(missing))
    if name == "auto" and missing:
        return make_sim()
    from nkibot.backends.neuron.backend import NeuronBackend
    from nkibot.backends.neuron.neff_cache import NeffCache

    # On hardware the device decides the generation (its compiler target and its figures).
    return NeuronBackend(
        core_id,
        compile_timeout_s=compile_timeout_s,
        cache=NeffCache(cache_dir) if cache_dir is not None else None,
        platform=device_platform() or platform,
    )
