"""The Trainium generation setting: parsing, resolution order, and where each layer reads it."""

from __future__ import annotations

import pytest

from nkibot.backends.neuron import devices
from nkibot.backends.select import host_platform
from nkibot.config.platform import (
    PlatformError,
    describe_platform,
    parse_platform,
    resolve_platform,
)
from nkibot.config.repo import ConfigError, RepoConfig, parse_repo_config
from nkibot.config.settings import Settings
from nkibot.handlers.jobs import merged_options
from nkibot.jobs.model import Job, JobOptions, Trigger
from nkibot.runner.jobrun import job_platform


class TestParse:
    @pytest.mark.parametrize(("text", "want"), [("trn1", "trn1"), (" TRN2 ", "trn2"),
                                                ("trn3", "trn3")])
    def test_known(self, text: str, want: str) -> None:
        assert parse_platform(text) == want

    @pytest.mark.parametrize("text", ["trn4", "inf1", "", "gen3"])
    def test_unknown_is_refused_with_the_choices(self, text: str) -> None:
        with pytest.raises(PlatformError, match="use trn1, trn2 or trn3"):
            parse_platform(text)

    def test_describe(self) -> None:
        assert describe_platform("trn3") == "trn3 (NeuronCore-v4)"


class TestResolve:
    def test_order_repo_setting_device_default(self) -> None:
        assert resolve_platform("trn3", "trn2", "trn1") == "trn3"
        assert resolve_platform(None, "trn2", "trn1") == "trn2"
        assert resolve_platform(None, None, "trn3") == "trn3"
        assert resolve_platform(None, None, None) == "trn1"

    def test_host_platform_probes_the_device_only_when_needed(self) -> None:
        def boom() -> str | None:
            raise AssertionError("device probed although a setting decides")

        assert host_platform("trn2", None, boom) == "trn2"
        assert host_platform(None, "trn3", boom) == "trn3"
        assert host_platform(None, None, lambda: "trn2") == "trn2"
        assert host_platform(None, None, lambda: None) == "trn1"


class TestSettingsAndRepoConfig:
    def test_nkibot_target_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NKIBOT_TARGET", "TRN2")
        assert Settings(_env_file=None).target == "trn2"  # type: ignore[call-arg]
        monkeypatch.setenv("NKIBOT_TARGET", "trn9")
        with pytest.raises(ValueError, match="target"):
            Settings(_env_file=None)  # type: ignore[call-arg]

    def test_repo_config_target(self) -> None:
        config = parse_repo_config("target: trn3\n")
        assert isinstance(config, RepoConfig) and config.target == "trn3"
        assert RepoConfig().target is None

    def test_repo_config_bad_target_names_the_field(self) -> None:
        err = parse_repo_config("target: trn9\n")
        assert isinstance(err, ConfigError) and err.field == "target"
        assert "trn1" in err.message()

    def test_job_carries_the_repo_target_and_commands_win(self) -> None:
        config = RepoConfig(target="trn2")
        assert merged_options(config, JobOptions()).platform == "trn2"
        assert merged_options(config, JobOptions(platform="trn3")).platform == "trn3"
        assert merged_options(RepoConfig(), JobOptions()).platform is None


def _job(platform: str | None) -> Job:
    trigger = Trigger(kind="comment", delivery_id="d", sender="alice")
    return Job(id="j", repo="o/r", installation_id=1, target="a.py::A", sha="s" * 40,
               trigger=trigger, options=JobOptions(platform=platform))  # type: ignore[arg-type]


class TestRunner:
    def test_job_platform(self) -> None:
        plain = Settings(_env_file=None)  # type: ignore[call-arg]
        on_trn2 = Settings(_env_file=None, target="trn2")  # type: ignore[call-arg]
        assert job_platform(_job("trn3"), on_trn2, lambda: "trn1") == "trn3"
        assert job_platform(_job(None), on_trn2, lambda: "trn1") == "trn2"
        assert job_platform(_job(None), plain, lambda: "trn3") == "trn3"
        assert job_platform(_job(None), plain, lambda: None) == "trn1"


class TestDeviceGeneration:
    @pytest.mark.parametrize(("instance", "want"), [
        ("trn1.2xlarge", "trn1"), ("trn1n.32xlarge", "trn1"), ("inf2.xlarge", "trn1"),
        ("trn2.48xlarge", "trn2"), ("trn2u.48xlarge", "trn2"), ("trn3.48xlarge", "trn3"),
        ("m7i.large", None), (None, None),
    ])
    def test_instance_family(self, instance: str | None, want: str | None) -> None:
        assert devices.generation_of_instance(instance) == want

    def test_no_device_is_none(self) -> None:
        assert devices.device_generation(present=lambda: False) is None

    def test_instance_type_decides(self) -> None:
        got = devices.device_generation(present=lambda: True, probe=lambda: "[]",
                                        instance=lambda: "trn2.48xlarge")
        assert got == "trn2"

    def test_without_dmi_lnc_config_means_trn2(self) -> None:
        trn2 = '[{"neuron_device": 0, "nc_count": 8, "logical_neuroncore_config": 2}]'
        trn1 = '[{"neuron_device": 0, "nc_count": 2}]'
        assert devices.device_generation(lambda: True, lambda: trn2, lambda: None) == "trn2"
        assert devices.device_generation(lambda: True, lambda: trn1, lambda: None) == "trn1"

    def test_instance_type_reads_dmi(self, tmp_path: object) -> None:
        from pathlib import Path

        path = Path(str(tmp_path)) / "product_name"
        path.write_text("trn1.32xlarge\n")
        assert devices.instance_type(path) == "trn1.32xlarge"
        assert devices.instance_type(Path(str(tmp_path)) / "missing") is None
