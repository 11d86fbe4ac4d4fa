"""Neuron devices, NeuronCores and SDK versions on this host, without importing the SDK.

`neuron-ls --json-output` (aws-neuronx-tools) prints a JSON list with one object per
Neuron device: `neuron_device`, `nc_count`, `neuroncore_ids` (the ids that
`NEURON_RT_VISIBLE_CORES` accepts), `memory_size` in bytes, `bdf`, `connected_to`,
`logical_neuroncore_config` (Trn2 only) and `neuron_processes`. Parsing is pure; running
the tool is one small function, so the runner and `nkibot doctor` share both.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: Where the DLAMI and the aws-neuronx-tools package install neuron-ls.
NEURON_TOOLS_DIR = Path("/opt/aws/neuron/bin")

#: Python distributions reported by `sdk_versions()`, by their pip names.
SDK_DISTRIBUTIONS: tuple[str, ...] = (
    "nki", "neuronx-cc", "torch-neuronx", "libneuronxla", "nrtpy", "torch", "numpy",
)


class NeuronLsError(ValueError):
    """neuron-ls printed something that is not its documented JSON."""


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    nc_count: int
    core_ids: tuple[int, ...]
    memory_bytes: int | None = None
    bdf: str | None = None
    lnc: int | None = None
    processes: tuple[int, ...] = field(default_factory=tuple)


def parse_neuron_ls(text: str) -> list[NeuronDevice]:
    """Devices from `neuron-ls -j` output; core ids are filled in when an old tool omits them."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NeuronLsError(f"neuron-ls output is not JSON: {exc}") from exc
    if isinstance(data, dict):  # tolerate a wrapper object around the list
        data = data.get("neuron_devices", data.get("devices", []))
    if not isinstance(data, list):
        raise NeuronLsError("neuron-ls JSON is not a list of devices")
    devices: list[NeuronDevice] = []
    next_core = 0
    for entry in data:
        if not isinstance(entry, dict) or "neuron_device" not in entry:
            raise NeuronLsError(f"not a neuron-ls device entry: {entry!r}")
        count = int(entry.get("nc_count", 0))
        ids = tuple(int(i) for i in entry.get("neuroncore_ids") or ())
        if not ids:
            ids = tuple(range(next_core, next_core + count))
        next_core = max(ids, default=next_core - 1) + 1
        lnc = entry.get("logical_neuroncore_config")
        devices.append(
            NeuronDevice(
                index=int(entry["neuron_device"]),
                nc_count=count or len(ids),
                core_ids=ids,
                memory_bytes=_int_or_none(entry.get("memory_size")),
                bdf=entry.get("bdf"),
                lnc=_int_or_none(lnc),
                processes=tuple(
                    int(p["pid"]) for p in entry.get("neuron_processes") or () if "pid" in p
                ),
            )
        )
    return devices


def _int_or_none(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def all_core_ids(devices: Iterable[NeuronDevice]) -> list[int]:
    """Every NeuronCore id on the host, sorted: one runner worker is pinned to each."""
    return sorted(core for device in devices for core in device.core_ids)


def neuron_ls_path() -> str | None:
    found = shutil.which("neuron-ls")
    if found:
        return found
    candidate = NEURON_TOOLS_DIR / "neuron-ls"
    return str(candidate) if candidate.exists() else None


def run_neuron_ls(timeout_s: float = 30.0) -> str | None:
    """neuron-ls's JSON text, or None when the tool is absent or fails."""
    exe = neuron_ls_path()
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "--json-output"], capture_output=True, text=True, timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def device_nodes(directory: Path = Path("/dev")) -> list[str]:
    """The Neuron driver's device nodes (/dev/neuron0, /dev/neuron1, ...)."""
    return sorted(str(p) for p in directory.glob("neuron*"))


def list_devices(probe: Callable[[], str | None] = run_neuron_ls) -> list[NeuronDevice]:
    """Devices reported by neuron-ls; empty when there is none or the output is unreadable."""
    text = probe()
    if not text:
        return []
    try:
        return parse_neuron_ls(text)
    except NeuronLsError:
        return []


def neuron_core_count(probe: Callable[[], str | None] = run_neuron_ls) -> int:
    """NeuronCores on this host (0 without a device): the runner starts one worker per core."""
    return len(all_core_ids(list_devices(probe)))


def neuron_device_present(
    nodes: Callable[[], list[str]] = device_nodes,
    tool: Callable[[], str | None] = neuron_ls_path,
) -> bool:
    """A NeuronCore is usable when the driver's device nodes and neuron-ls both exist."""
    return bool(nodes()) and tool() is not None


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def sdk_versions(
    names: Iterable[str] = SDK_DISTRIBUTIONS,
    version_of: Callable[[str], str | None] = _dist_version,
) -> dict[str, str | None]:
    """Installed versions of the Neuron SDK's Python packages (None when absent); no imports."""
    return {name: version_of(name) for name in names}


def official_nki_available(
    version_of: Callable[[str], str | None] = _dist_version,
    locate: Callable[[str], Path | None] | None = None,
) -> bool:
    """True when AWS's `nki` package (not PyPI's empty placeholder, not our simulator) is here.

    The real package is a directory with `language` and `isa` subpackages; the placeholder
    on PyPI has neither, and our simulator lives inside nkibot, never as a top-level `nki`.
    """
    if version_of("nki") is None:
        return False
    package_dir = (locate or _package_dir)("nki")
    if package_dir is None or _inside_nkibot(package_dir):
        return False
    return (package_dir / "language").exists() and (package_dir / "isa").exists()


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _nkibot_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _inside_nkibot(path: Path) -> bool:
    return path.resolve().is_relative_to(_nkibot_root())


def hardware_problems(
    present: Callable[[], bool] = neuron_device_present,
    version_of: Callable[[str], str | None] = _dist_version,
    locate: Callable[[str], Path | None] | None = None,
) -> list[str]:
    """What keeps the neuron backend from running here (empty when it can run)."""
    problems: list[str] = []
    if not present():
        problems.append("no Neuron device: /dev/neuron* or neuron-ls is missing")
    if not official_nki_available(version_of, locate):
        problems.append("the official `nki` package is not installed (Neuron pip index)")
    if version_of("neuronx-cc") is None:
        problems.append("neuronx-cc is not installed (Neuron pip index)")
    return problems


def hardware_ready(
    present: Callable[[], bool] = neuron_device_present,
    version_of: Callable[[str], str | None] = _dist_version,
    locate: Callable[[str], Path | None] | None = None,
) -> bool:
    """A device, the official `nki` package and neuronx-cc: what the neuron backend needs."""
    return not hardware_problems(present, version_of, locate)


#: EC2 writes the instance type (e.g. `trn1.32xlarge`) to the DMI product name on Nitro.
DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
#: Instance family -> the Trainium generation nkibot checks for there (Inf2 is v2 too).
_FAMILIES = {"trn1": "trn1", "trn1n": "trn1", "inf2": "trn1", "trn2": "trn2", "trn2u": "trn2",
             "trn3": "trn3"}


def instance_type(path: Path = DMI_PRODUCT_NAME) -> str | None:
    """This host's EC2 instance type, from DMI (no network); None when unreadable."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def generation_of_instance(name: str | None) -> str | None:
    """`trn2.48xlarge` -> "trn2"; None for an instance that is not a Neuron family."""
    family = (name or "").split(".", 1)[0].lower()
    return _FAMILIES.get(family)


def device_generation(
    present: Callable[[], bool] = neuron_device_present,
    probe: Callable[[], str | None] = run_neuron_ls,
    instance: Callable[[], str | None] = instance_type,
) -> str | None:
    """The Trainium generation of this host's Neuron device; None without a device.

    The instance type names it; where DMI is not readable, a device that reports a
    logical NeuronCore config is a Trn2 (neuron-ls prints it there only), else a Trn1.
    """
    if not present():
        return None
    found = generation_of_instance(instance())
    if found is not None:
        return found
    devices = list_devices(probe)
    return "trn2" if any(d.lnc is not None for d in devices) else "trn1"
