"""The CDK app synthesizes offline to a template with the promised resources, clean under cfn-lint.

One synth per test session (jsii start-up is slow): the template fixture is module-scoped.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE", "1")

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
sys.path.insert(0, str(INFRA))

from aws_cdk import App  # noqa: E402
from aws_cdk.assertions import Match, Template  # noqa: E402
from nkibot_infra.stack import NkibotStack  # noqa: E402


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Template, Path]]:
    out = tmp_path_factory.mktemp("cdk.out")
    context = ROOT
    if not (ROOT / "Dockerfile").exists():  # the service image's Dockerfile lands separately
        context = tmp_path_factory.mktemp("image")
        (context / "Dockerfile").write_text("FROM python:3.11-slim\n")
    cdk_context = json.loads((INFRA / "cdk.json").read_text())["context"]
    app = App(outdir=str(out), context=cdk_context)
    stack = NkibotStack(app, "Nkibot", image_context=context)
    template = Template.from_stack(stack)
    app.synth()
    yield template, out / "Nkibot.template.json"


@pytest.fixture(scope="module")
def template(synth: tuple[Template, Path]) -> Template:
    return synth[0]


def _resources(template: Template, kind: str) -> dict[str, Any]:
    return dict(template.find_resources(kind))


def _statements(template: Template, role_fragment: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for name, policy in _resources(template, "AWS::IAM::Policy").items():
        if role_fragment in name:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


class TestQueues:
    def test_fifo_queues_with_dlq(self, template: Template) -> None:
        """inbox and jobs are FIFO and redrive to a FIFO DLQ after 3 receives."""
        queues = _resources(template, "AWS::SQS::Queue")
        assert len(queues) == 4
        assert all(q["Properties"]["FifoQueue"] is True for q in queues.values())
        redriven = [q for q in queues.values() if "RedrivePolicy" in q["Properties"]]
        assert len(redriven) == 2
        assert {q["Properties"]["RedrivePolicy"]["maxReceiveCount"] for q in redriven} == {3}

    def test_dlq_depth_alarms(self, template: Template) -> None:
        """Each DLQ has an alarm at one visible message, notifying an SNS topic."""
        template.resource_count_is("AWS::CloudWatch::Alarm", 2)
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Threshold": 1,
            "AlarmActions": Match.any_value(),
        })


class TestRunner:
    def test_trn1_on_the_neuron_dlami(self, template: Template) -> None:
        """The launch template uses a trn1 instance and the DLAMI's SSM parameter."""
        lts = _resources(template, "AWS::EC2::LaunchTemplate")
        [lt] = lts.values()
        data = lt["Properties"]["LaunchTemplateData"]
        assert data["InstanceType"].startswith("trn1.")
        params = template.to_json()["Parameters"]
        assert any(
            p.get("Default") == "/aws/service/neuron/dlami/base/ubuntu-24.04/latest/image_id"
            for p in params.values()
        )
        assert data["MetadataOptions"]["HttpTokens"] == "required"

    def test_user_data_installs_service(self, template: Template) -> None:
        """User data installs nkibot, the Neuron SDK packages and the systemd unit."""
        [lt] = _resources(template, "AWS::EC2::LaunchTemplate").values()
        text = json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])
        for needle in ("pip.repos.neuron.amazonaws.com", "nkibot-runner.service",
                       "systemctl enable --now", "Restart=on-failure", "User=nkibot"):
            assert needle in text, needle

    def test_asg_can_scale_to_zero(self, template: Template) -> None:
        """The runner group's minimum is zero so operators can park it."""
        template.has_resource_properties("AWS::AutoScaling::AutoScalingGroup",
                                         {"MinSize": "0"})


class TestIam:
    def test_runner_is_scoped(self, template: Template) -> None:
        """The runner consumes jobs, reads its two secrets, invokes one Bedrock model."""
        statements = _statements(template, "RunnerRole")
        for st in statements:
            assert st["Resource"] != "*", st
        actions = {a for st in statements for a in
                   (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
        assert "sqs:ReceiveMessage" in actions and "sqs:SendMessage" not in actions
        assert "bedrock:InvokeModel" in actions
        assert "secretsmanager:GetSecretValue" in actions
        bedrock = next(st for st in statements if "bedrock:InvokeModel" in st["Action"])
        assert "foundation-model/anthropic.claude" in json.dumps(bedrock["Resource"])

    def test_service_sends_and_reads_its_secrets(self, template: Template) -> None:
        """The service's task role sends to the queues and has no Bedrock access."""
        task = [st for name, p in _resources(template, "AWS::IAM::Policy").items()
                if "TaskRole" in name for st in p["Properties"]["PolicyDocument"]["Statement"]]
        text = json.dumps(task)
        assert "sqs:SendMessage" in text and "bedrock" not in text
        assert all(st["Resource"] != "*" for st in task)

    def test_secrets_exist(self, template: Template) -> None:
        """Three secrets: App private key, webhook secret, Anthropic key."""
        template.resource_count_is("AWS::SecretsManager::Secret", 3)


class TestService:
    def test_https_listener_and_logs(self, template: Template) -> None:
        """The ALB listens on HTTPS 443 with the given certificate; logs go to CloudWatch."""
        template.has_resource_properties("AWS::ElasticLoadBalancingV2::Listener", {
            "Protocol": "HTTPS", "Port": 443,
        })
        template.has_resource_properties("AWS::ECS::TaskDefinition", {
            "ContainerDefinitions": Match.array_with([Match.object_like({
                "LogConfiguration": Match.object_like({"LogDriver": "awslogs"}),
            })]),
        })
        assert len(_resources(template, "AWS::Logs::LogGroup")) >= 2


class TestCfnLint:
    def test_template_is_clean(self, synth: tuple[Template, Path]) -> None:
        """cfn-lint reports nothing on the synthesized template."""
        path = synth[1]
        assert path.exists()
        from cfnlint.api import lint_file

        matches = lint_file(path)
        assert matches == [], "\n".join(str(m) for m in matches)


def _user_data_text(template: Template) -> str:
    [lt] = _resources(template, "AWS::EC2::LaunchTemplate").values()
    return json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])


class TestRunnerFamily:
    def test_default_family_is_trn1(self, template: Template) -> None:
        """Without context the runner is a trn1 and checks kernels for trn1."""
        assert "NKIBOT_TARGET=$TARGET" in _user_data_text(template)
        assert 'TARGET=\\"trn1\\"' in _user_data_text(template)

    def test_trn2_family_sets_instance_and_target(self, tmp_path: Path) -> None:
        """runnerInstanceFamily=trn2 gives a trn2 instance whose runner checks for trn2."""
        image = tmp_path / "image"
        image.mkdir()
        (image / "Dockerfile").write_text("FROM python:3.11-slim\n")
        cdk_context = json.loads((INFRA / "cdk.json").read_text())["context"]
        app = App(outdir=str(tmp_path / "out"),
                  context={**cdk_context, "runnerInstanceFamily": "trn2"})
        template = Template.from_stack(NkibotStack(app, "NkibotTrn2", image_context=image))
        [lt] = _resources(template, "AWS::EC2::LaunchTemplate").values()
        assert lt["Properties"]["LaunchTemplateData"]["InstanceType"] == "trn2.48xlarge"
        assert 'TARGET=\\"trn2\\"' in _user_data_text(template)

    @pytest.mark.parametrize(("family", "given", "error"), [
        ("trn4", None, "use trn1, trn2 or trn3"),
        ("trn3", None, "set runnerInstanceType too"),
        ("trn2", "trn1.32xlarge", "is not a trn2 instance"),
    ])
    def test_bad_family_or_type_is_refused(self, family: str, given: str | None,
                                           error: str) -> None:
        from nkibot_infra.stack import runner_instance_type

        with pytest.raises(ValueError, match=error):
            runner_instance_type(family, given)

    def test_family_variants_accepted(self) -> None:
        from nkibot_infra.stack import runner_instance_type

        assert runner_instance_type("trn1", "trn1n.32xlarge") == "trn1n.32xlarge"
        assert runner_instance_type("trn3", "trn3.48xlarge") == "trn3.48xlarge"


class TestSecretsHygiene:
    """The runner's secrets file is readable by the runner's uid alone (docs/security.md)."""

    @pytest.fixture(scope="class")
    def user_data(self, template: Template) -> str:
        [lt] = _resources(template, "AWS::EC2::LaunchTemplate").values()
        return str(json.loads(json.dumps(lt["Properties"]["LaunchTemplateData"]["UserData"])))

    def test_secrets_file_is_owner_only(self, user_data: str) -> None:
        """fetch-secrets writes 0400 nkibot:nkibot in a 0700 directory, never group-readable."""
        for needle in ("install -d -m 0700 -o nkibot -g nkibot /run/nkibot", "umask 0377",
                       "chown nkibot:nkibot /run/nkibot/secrets.env.new",
                       "chmod 0400 /run/nkibot/secrets.env.new"):
            assert needle in user_data, needle
        assert "chmod 0640" not in user_data and "chgrp" not in user_data

    def test_sandbox_uid_is_separate(self, user_data: str) -> None:
        """A dedicated sandbox user exists and is never added to the nkibot group."""
        assert "useradd --system --no-create-home --shell /usr/sbin/nologin nkibot-sandbox" \
            in user_data
        assert "usermod -aG nkibot" not in user_data

    def test_unit_reads_secrets_into_memory(self, user_data: str) -> None:
        """The unit names the file for the runner to read; it is no EnvironmentFile."""
        unit = (INFRA / "systemd" / "nkibot-runner.service").read_text()
        assert "Environment=NKIBOT_SECRETS_FILE=/run/nkibot/secrets.env" in unit
        assert "EnvironmentFile=-/run/nkibot/secrets.env" not in unit
        assert "secrets.env" not in "".join(
            ln for ln in unit.splitlines() if ln.startswith("EnvironmentFile"))
        for needle in ("UMask=0077", "LimitCORE=0", "NoNewPrivileges=yes"):
            assert needle in unit, needle
        assert "NKIBOT_SECRETS_FILE=/run/nkibot/secrets.env" in user_data
