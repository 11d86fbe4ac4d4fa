"""`nkibot doctor`: pure checks over Settings and injected probes; secrets never printed."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr
from typer.testing import CliRunner

from nkibot.backends.neuron.devices import NeuronDevice
from nkibot.cli import app
from nkibot.config.settings import Settings
from nkibot.doctor import Probes, exit_code, run_checks
from nkibot.jobs.sqlite import SqliteQueue
from nkibot.verify.isolation import Isolation

PEM = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption()).decode()
TRN1 = [NeuronDevice(index=0, nc_count=2, core_ids=(0, 1))]


def _settings(**kw: object) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


REDUCED = Isolation("reduced", ("bubblewrap ('bwrap' not found)",),
                    ("apt-get install bubblewrap",))


def _probes(*, hardware: bool, queue_ok: bool = True, aws: bool = False,
            isolation: Isolation = REDUCED) -> Probes:
    def depth(_: Settings) -> int:
        if not queue_ok:
            raise ConnectionError("connection refused")
        return 4

    versions = {"torch": "2.13.0", "nki": "0.4.0" if hardware else None,
                "neuronx-cc": "2.22.1" if hardware else None, "torch-neuronx": None}
    return Probes(versions=lambda: versions, neuron_devices=lambda: TRN1 if hardware else [],
                  official_nki=lambda: hardware, queue_depth=depth,
                  aws_credentials=lambda: aws, isolation=lambda _: isolation,
                  python="3.11.7", generation=lambda: "trn1" if hardware else None)


def _by_name(checks: list) -> dict:  # type: ignore[type-arg]
    return {c.name: c for c in checks}


class TestRunnerRole:
    def test_ready_trn1_host_passes(self) -> None:
        """A Trn1 host with SDK, queue, App key and a model credential exits 0."""
        settings = _settings(app_id=1, private_key=SecretStr(PEM),
                             anthropic_api_key=SecretStr("sk-ant-xxxxxxxxxxxx"),
                             queue_url="sqs://https://sqs.us-east-1.amazonaws.com/1/inbox.fifo",
                             jobs_queue_url="sqs://https://sqs.us-east-1.amazonaws.com/1/j.fifo")
        checks = run_checks(settings, "runner", _probes(hardware=True,
                                                        isolation=Isolation("full")))
        found = _by_name(checks)
        assert found["neuron devices"].detail == "1 devices, 2 NeuronCores"
        assert found["github app"].status == "ok"
        assert found["queue"].detail == "reachable, 4 jobs queued"
        assert found["sandbox"].status == "ok" and "full" in found["sandbox"].detail
        assert exit_code(checks) == 0

    def test_reduced_isolation_fails_a_runner_unless_allowed(self) -> None:
        """Reduced isolation: the runner refuses jobs (fail, with the fix) unless allowed."""
        found = _by_name(run_checks(_settings(), "runner", _probes(hardware=True)))
        assert found["sandbox"].status == "fail"
        assert "bubblewrap" in found["sandbox"].detail and "refuses" in found["sandbox"].detail
        assert found["sandbox"].fix == "apt-get install bubblewrap"
        allowed = _by_name(run_checks(_settings(allow_reduced_isolation=True), "runner",
                                      _probes(hardware=True)))
        assert allowed["sandbox"].status == "warn"
        assert "NKIBOT_ALLOW_REDUCED_ISOLATION" in allowed["sandbox"].detail

    def test_missing_sdk_and_device_fail_for_runner(self) -> None:
        """Without device and SDK the runner role fails, with fixes suggested."""
        checks = run_checks(_settings(), "runner", _probes(hardware=False))
        found = _by_name(checks)
        sdk = found["neuron sdk"]
        assert sdk.status == "fail" and "pip.repos.neuron" in sdk.fix
        assert found["neuron devices"].status == "fail"
        assert found["model credentials"].status == "fail"
        assert exit_code(checks) == 1

    def test_unreachable_queue_fails(self) -> None:
        """A queue that cannot be reached is a failure naming the error."""
        checks = run_checks(_settings(), "runner", _probes(hardware=True, queue_ok=False))
        assert "connection refused" in _by_name(checks)["queue"].detail


class TestCredentials:
    def test_invalid_pem_is_reported_not_printed(self) -> None:
        """A key that does not parse is invalid; its text never appears in the output."""
        secret = "-----BEGIN PRIVATE KEY-----\nnotakey\n-----END PRIVATE KEY-----"
        checks = run_checks(_settings(app_id=7, private_key=SecretStr(secret)), "service",
                            _probes(hardware=False))
        gh = _by_name(checks)["github app"]
        assert gh.status == "fail" and "not a valid PEM" in gh.detail
        assert "notakey" not in json.dumps([c.__dict__ for c in checks])

    def test_missing_key_file(self, tmp_path: Path) -> None:
        """A private key path that does not exist is reported as unreadable."""
        checks = run_checks(_settings(app_id=7, private_key_path=tmp_path / "nope.pem"),
                            "service", _probes(hardware=False))
        assert "unreadable" in _by_name(checks)["github app"].detail

    def test_service_needs_webhook_secret(self) -> None:
        """The service role fails without a webhook secret; local only warns."""
        assert _by_name(run_checks(_settings(), "service", _probes(hardware=False)))[
            "webhook secret"].status == "fail"
        assert _by_name(run_checks(_settings(), "local", _probes(hardware=False)))[
            "webhook secret"].status == "warn"

    def test_aws_credentials_count_for_models(self) -> None:
        """AWS credentials (Bedrock) satisfy the model-credentials check."""
        found = _by_name(run_checks(_settings(), "runner", _probes(hardware=True, aws=True)))
        assert found["model credentials"].status == "ok"


class TestLocalRole:
    def test_local_without_sdk_only_warns(self) -> None:
        """A laptop without the Neuron SDK is fine for local use (simulator)."""
        checks = run_checks(_settings(), "local", _probes(hardware=False))
        assert exit_code(checks) == 0
        assert "queue" not in _by_name(checks)  # local SQLite queue is not probed


class TestCli:
    def test_json_output_and_exit_code(self, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        """`nkibot doctor --role runner --json` prints checks and exits 1 on this host."""
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(app, ["doctor", "--role", "runner", "--json"])
        assert result.exit_code == 1
        data = json.loads(result.output)
        assert data["role"] == "runner"
        assert {c["name"] for c in data["checks"]} >= {"python", "neuron sdk", "sandbox"}

    def test_bad_role(self) -> None:
        """An unknown role is a usage error."""
        assert CliRunner().invoke(app, ["doctor", "--role", "chef"]).exit_code == 2


class TestGeneration:
    def test_trn1_device_reported(self) -> None:
        """A Trn1 host checks kernels for trn1 and says why."""
        found = _by_name(run_checks(_settings(), "local", _probes(hardware=True)))
        check = found["trainium generation"]
        assert check.status == "ok"
        assert check.detail.startswith("trn1 (NeuronCore-v2) (this host's trn1 device")

    def test_no_device_defaults_to_trn1(self) -> None:
        check = _by_name(run_checks(_settings(), "local", _probes(hardware=False)))[
            "trainium generation"]
        assert check.detail.startswith("trn1 (NeuronCore-v2) (no device")

    def test_setting_wins_and_mismatch_warns(self) -> None:
        """NKIBOT_TARGET=trn3 on a trn1 device with the neuron backend is flagged."""
        settings = _settings(target="trn3", backend="neuron")
        check = _by_name(run_checks(settings, "runner", _probes(hardware=True)))[
            "trainium generation"]
        assert check.status == "warn"
        assert check.detail.startswith("trn3 (NeuronCore-v4) (NKIBOT_TARGET")
        assert "trn3 instance" in (check.fix or "")


class TestTable:
    def test_fix_column_wraps_at_80_columns(self, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        """The fix column folds long URLs and commands onto more lines; nothing is cut."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("COLUMNS", "80")
        out = CliRunner().invoke(app, ["doctor", "--role", "runner"]).output
        assert "…" not in out
        fix_cells = "".join(line.split("│")[-2].strip() for line in out.splitlines()
                            if line.count("│") == 5)
        # Cells joined line by line: a folded URL reads whole again.
        assert "https://pip.repos.neuron.amazonaws.com" in fix_cells


class TestDeadLetters:
    def test_newest_cause_is_shown(self, tmp_path: Path) -> None:
        """A dead inbox row's cause, stored by the queue, is in the service's report."""
        queue = SqliteQueue(tmp_path / "q.db", "inbox", max_attempts=1)
        queue.put(b"{}", "delivery-1")
        lease = queue.lease(10)
        assert lease is not None
        queue.nack(lease, 0.0, "RequestFailed: Response(404 Not Found)")
        probes = _probes(hardware=False)
        probes.dead_letters = lambda _s, name: queue.dead_report() if name == "inbox" else None
        check = _by_name(run_checks(_settings(), "service", probes))["inbox dead letters"]
        assert check.status == "warn"
        assert check.detail == ("1 dead; newest delivery-1: failed 1 times: "
                                "RequestFailed: Response(404 Not Found)")
