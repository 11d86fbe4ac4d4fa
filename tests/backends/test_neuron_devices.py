"""neuron-ls parsing, NeuronCore counting, SDK detection (no device needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.backends.neuron import devices
from nkibot.backends.neuron.devices import NeuronLsError, parse_neuron_ls

FIXTURES = Path(__file__).parent / "fixtures"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


class TestParseNeuronLs:
    def test_trn1_32xlarge_has_32_cores(self) -> None:
        """A trn1.32xlarge lists 16 devices of 2 NeuronCores, ids 0..31 in order."""
        found = parse_neuron_ls(_text("neuron_ls_trn1_32xlarge.json"))
        assert len(found) == 16
        assert found[3].core_ids == (6, 7)
        assert found[0].memory_bytes == 32 * 1024**3
        assert found[0].processes == (4242,)
        assert devices.all_core_ids(found) == list(range(32))

    def test_missing_core_ids_are_numbered_in_device_order(self) -> None:
        """Without neuroncore_ids, cores are numbered consecutively across devices."""
        found = parse_neuron_ls(_text("neuron_ls_no_core_ids.json"))
        assert [d.core_ids for d in found] == [(0, 1), (2, 3)]

    def test_not_json_is_an_error(self) -> None:
        """Text that is not neuron-ls's JSON raises NeuronLsError, naming the problem."""
        with pytest.raises(NeuronLsError, match="not JSON"):
            parse_neuron_ls("+--------+ NEURON DEVICE")

    def test_entry_without_device_index_is_an_error(self) -> None:
        """A list entry that is not a device entry is rejected."""
        with pytest.raises(NeuronLsError):
            parse_neuron_ls('[{"nc_count": 2}]')


class TestNeuronCoreCount:
    def test_counts_cores_from_the_probe(self) -> None:
        """The worker count is the number of NeuronCores neuron-ls reports."""
        assert devices.neuron_core_count(lambda: _text("neuron_ls_trn1_2xlarge.json")) == 2

    def test_zero_without_neuron_ls(self) -> None:
        """No neuron-ls (probe returns None) means no NeuronCores."""
        assert devices.neuron_core_count(lambda: None) == 0

    def test_zero_for_unreadable_output(self) -> None:
        """Garbage output counts as no device rather than crashing the runner."""
        assert devices.neuron_core_count(lambda: "oops") == 0

    def test_this_host_has_no_device(self) -> None:
        """The real probe on this CI host finds no NeuronCore (no SDK installed)."""
        if devices.neuron_device_present():
            pytest.skip("this host has a Neuron device")
        assert devices.neuron_core_count() == 0


class TestDevicePresence:
    def test_needs_nodes_and_tool(self) -> None:
        """Device nodes without neuron-ls (or the reverse) is not a usable device."""
        assert devices.neuron_device_present(lambda: ["/dev/neuron0"], lambda: "/x/neuron-ls")
        assert not devices.neuron_device_present(lambda: [], lambda: "/x/neuron-ls")
        assert not devices.neuron_device_present(lambda: ["/dev/neuron0"], lambda: None)

    def test_device_nodes_lists_neuron_entries(self, tmp_path: Path) -> None:
        """Only neuron* entries of the device directory are device nodes."""
        for name in ("neuron0", "neuron1", "nvme0"):
            (tmp_path / name).touch()
        assert [Path(p).name for p in devices.device_nodes(tmp_path)] == ["neuron0", "neuron1"]


def _versions(**found: str) -> object:
    return lambda name: found.get(name.replace("-", "_"))


class TestOfficialNki:
    def _real_package(self, root: Path) -> Path:
        pkg = root / "nki"
        (pkg / "language").mkdir(parents=True)
        (pkg / "isa").mkdir()
        return pkg

    def test_real_package_is_detected(self, tmp_path: Path) -> None:
        """A distribution plus an nki package with language/ and isa/ is the official one."""
        pkg = self._real_package(tmp_path)
        assert devices.official_nki_available(_versions(nki="0.4.0"), lambda _: pkg)

    def test_placeholder_is_not_official(self, tmp_path: Path) -> None:
        """PyPI's empty `nki` placeholder (no language/isa) does not count."""
        (tmp_path / "nki").mkdir()
        placeholder = tmp_path / "nki"
        assert not devices.official_nki_available(_versions(nki="0.0.1"), lambda _: placeholder)

    def test_no_distribution_is_not_official(self, tmp_path: Path) -> None:
        """Without an installed `nki` distribution nothing is official, whatever is importable."""
        pkg = self._real_package(tmp_path)
        assert not devices.official_nki_available(_versions(), lambda _: pkg)

    def test_this_host_has_no_official_nki(self) -> None:
        """The CI host has no Neuron SDK, so the simulator is ours."""
        assert not devices.official_nki_available()


class TestSdkVersions:
    def test_reports_each_distribution(self) -> None:
        """Every asked-for distribution appears, None when it is not installed."""
        got = devices.sdk_versions(["torch", "neuronx-cc"], _versions(torch="2.13.0"))
        assert got == {"torch": "2.13.0", "neuronx-cc": None}

    def test_real_lookup_finds_torch_not_neuronx_cc(self) -> None:
        """On this host torch is installed and neuronx-cc is not."""
        got = devices.sdk_versions()
        assert got["torch"] and got["neuronx-cc"] is None


class TestHardwareProblems:
    def test_lists_each_missing_piece(self) -> None:
        """No device, no nki and no neuronx-cc are three separate problems."""
        problems = devices.hardware_problems(lambda: False, _versions(), None)
        assert len(problems) == 3
        assert not devices.hardware_ready(lambda: False, _versions(), None)

    def test_ready_when_everything_is_there(self, tmp_path: Path) -> None:
        """A device, the official nki package and neuronx-cc make the host ready."""
        pkg = tmp_path / "nki"
        (pkg / "language").mkdir(parents=True)
        (pkg / "isa").mkdir()
        versions = _versions(nki="0.4.0", neuronx_cc="2.22.1")
        assert devices.hardware_ready(lambda: True, versions, lambda _: pkg)
