"""The whole nkibot deployment in one stack.

- SQS FIFO queues `inbox` (webhook deliveries) and `jobs` (conversion jobs), each with a
  dead-letter queue after `max_receive_count` receives, and an alarm on each DLQ's depth.
- The webhook service on ECS Fargate behind an HTTPS Application Load Balancer.
- The Trn1 runner: an Auto Scaling Group on the Neuron base DLAMI (its public SSM
  parameter), bootstrapped by user data that installs nkibot and its systemd unit.
- Secrets Manager secrets for the App private key, the webhook secret and the Anthropic key.
- Least-privilege IAM: each role names the queues, secrets, log group and model it uses.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnParameter, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_ecs_patterns as ecs_patterns
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

HERE = Path(__file__).resolve().parent
UNIT_FILE = HERE.parent / "systemd" / "nkibot-runner.service"
USER_DATA = HERE / "runner-user-data.sh"
#: Never staged into the image build context (secrets, caches, this app's own output).
IMAGE_EXCLUDES = [
    ".git", ".venv", "**/__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    ".hypothesis", ".benchmarks", "infra/cdk.out", "nki_out", "*.db", "*.db-*", ".env",
    "*.egg-info", "build", "dist",
]


#: Runner instance family (CDK context `runnerInstanceFamily`) -> the default instance type.
#: trn2.48xlarge is the Trn2 size the Neuron docs use; Trn3 has no documented size here, so
#: a trn3 runner needs `runnerInstanceType` as well.
RUNNER_FAMILIES: dict[str, str | None] = {"trn1": "trn1.2xlarge", "trn2": "trn2.48xlarge",
                                          "trn3": None}


def runner_instance_type(family: str, instance_type: object = None) -> str:
    """The runner's EC2 instance type for a family; an explicit type must be of that family."""
    if family not in RUNNER_FAMILIES:
        raise ValueError(f"runnerInstanceFamily={family!r}: use trn1, trn2 or trn3")
    chosen = str(instance_type) if instance_type else RUNNER_FAMILIES[family]
    if chosen is None:
        raise ValueError(f"runnerInstanceFamily={family}: set runnerInstanceType too")
    if chosen.split(".", 1)[0].rstrip("nu") != family:
        raise ValueError(f"runnerInstanceType={chosen} is not a {family} instance")
    return chosen


class NkibotStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, image_context: Path,
                 **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        ctx = self.node.try_get_context
        cert_arn = CfnParameter(
            self, "CertificateArn", type="String",
            description="ACM certificate ARN for the webhook's HTTPS listener",
        )
        app_id = CfnParameter(self, "GitHubAppId", type="String",
                              description="The GitHub App's numeric id")
        self.secrets = {
            name: secretsmanager.Secret(self, f"{name}Secret", description=text)
            for name, text in (
                ("AppPrivateKey", "GitHub App private key (PEM)"),
                ("WebhookSecret", "GitHub App webhook secret"),
                ("AnthropicApiKey", "Anthropic API key for the runner"),
            )
        }
        alarm_topic = sns.Topic(self, "AlarmTopic", display_name="nkibot alarms")
        if email := ctx("alarmEmail"):
            alarm_topic.add_subscription(subs.EmailSubscription(str(email)))
        self.queues = {name: self._queue(name, alarm_topic) for name in ("inbox", "jobs")}
        vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=1)
        self._service(vpc, cert_arn.value_as_string, app_id.value_as_string, image_context)
        family = str(ctx("runnerInstanceFamily") or "trn1")
        self._runner(vpc, app_id.value_as_string, family,
                     runner_instance_type(family, ctx("runnerInstanceType")))

    def _queue(self, name: str, topic: sns.ITopic) -> sqs.Queue:
        dlq = sqs.Queue(
            self, f"{name.title()}Dlq", fifo=True, retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
        queue = sqs.Queue(
            self, f"{name.title()}Queue", fifo=True, content_based_deduplication=False,
            visibility_timeout=Duration.minutes(15 if name == "jobs" else 2),
            retention_period=Duration.days(4), encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3),
        )
        alarm = cloudwatch.Alarm(
            self, f"{name.title()}DlqDepthAlarm",
            alarm_description=f"nkibot {name} messages reached the dead-letter queue",
            metric=dlq.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"),
            threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(topic))
        return queue

    def _queue_env(self) -> dict[str, str]:
        return {
            "NKIBOT_QUEUE_URL": "sqs://" + self.queues["inbox"].queue_url,
            "NKIBOT_JOBS_QUEUE_URL": "sqs://" + self.queues["jobs"].queue_url,
            "NKIBOT_AWS_REGION": self.region,
        }

    def _service(self, vpc: ec2.IVpc, cert_arn: str, app_id: str, context: Path) -> None:
        log_group = logs.LogGroup(self, "ServiceLogs", retention=logs.RetentionDays.ONE_MONTH,
                                  removal_policy=RemovalPolicy.DESTROY)
        image = ecs.ContainerImage.from_asset(str(context), exclude=IMAGE_EXCLUDES)
        service = ecs_patterns.ApplicationLoadBalancedFargateService(
            self, "Webhook", vpc=vpc, cpu=512, memory_limit_mib=1024, desired_count=1,
            public_load_balancer=True, redirect_http=True,
            protocol=elbv2.ApplicationProtocol.HTTPS,
            certificate=acm.Certificate.from_certificate_arn(self, "Cert", cert_arn),
            ssl_policy=elbv2.SslPolicy.RECOMMENDED_TLS,
            task_image_options=ecs_patterns.ApplicationLoadBalancedTaskImageOptions(
                image=image, container_port=8000,
                command=["nkibot", "serve", "--host", "0.0.0.0", "--port", "8000"],
                environment={**self._queue_env(), "NKIBOT_APP_ID": app_id},
                secrets={
                    "NKIBOT_PRIVATE_KEY": ecs.Secret.from_secrets_manager(
                        self.secrets["AppPrivateKey"]),
                    "NKIBOT_WEBHOOK_SECRET": ecs.Secret.from_secrets_manager(
                        self.secrets["WebhookSecret"]),
                },
                log_driver=ecs.LogDrivers.aws_logs(stream_prefix="webhook",
                                                   log_group=log_group),
            ),
        )
        service.target_group.configure_health_check(path="/healthz")
        # ecs_patterns adds a DependsOn on the target group that its Ref already implies;
        # harmless, but cfn-lint flags it (W3005). Silence that one check on this resource.
        cfn_service = service.service.node.default_child
        if isinstance(cfn_service, CfnResource):
            cfn_service.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        role = service.task_definition.task_role
        # The webhook persists deliveries to the inbox and the dispatcher (same service)
        # consumes it; the dispatcher sends jobs. Nothing else.
        self.queues["inbox"].grant_send_messages(role)
        self.queues["inbox"].grant_consume_messages(role)
        self.queues["jobs"].grant_send_messages(role)
        self.service = service

    def _runner(self, vpc: ec2.IVpc, app_id: str, family: str, instance_type: str) -> None:
        ctx = self.node.try_get_context
        log_group = logs.LogGroup(self, "RunnerLogs", retention=logs.RetentionDays.ONE_MONTH,
                                  removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, "RunnerRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(
                            "AmazonSSMManagedInstanceCore")])
        self.queues["jobs"].grant_consume_messages(role)
        for name in ("AppPrivateKey", "AnthropicApiKey"):
            self.secrets[name].grant_read(role)
        log_group.grant_write(role)
        model = str(ctx("bedrockModelId") or "anthropic.claude-opus-4-5-20251101-v1:0")
        role.add_to_policy(iam.PolicyStatement(
            actions=["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"],
            resources=[f"arn:{self.partition}:bedrock:{self.region}::foundation-model/{model}"],
        ))
        ssm_path = str(ctx("dlamiSsmParameter") or
                       "/aws/service/neuron/dlami/base/ubuntu-24.04/latest/image_id")
        user_data = ec2.UserData.for_linux()
        user_data.add_commands(self._user_data_script(app_id, log_group, model, family))
        dlami = ec2.MachineImage.from_ssm_parameter(ssm_path, os=ec2.OperatingSystemType.LINUX)
        disk = ec2.BlockDeviceVolume.ebs(200, volume_type=ec2.EbsDeviceVolumeType.GP3,
                                         encrypted=True)
        template = ec2.LaunchTemplate(
            self, "RunnerTemplate", instance_type=ec2.InstanceType(instance_type),
            machine_image=dlami,
            role=role, user_data=user_data, require_imdsv2=True,
            security_group=ec2.SecurityGroup(self, "RunnerSg", vpc=vpc,
                                             description="nkibot runner: egress only"),
            block_devices=[ec2.BlockDevice(device_name="/dev/sda1", volume=disk)],
        )
        self.runner = autoscaling.AutoScalingGroup(
            self, "Runner", vpc=vpc, launch_template=template,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            min_capacity=0, max_capacity=int(ctx("runnerMaxInstances") or 2),
            desired_capacity=int(ctx("runnerDesiredInstances") or 1),
        )

    def _user_data_script(self, app_id: str, log_group: logs.ILogGroup, model: str,
                          family: str) -> str:
        values = {
            "REGION": self.region,
            "JOBS_QUEUE_URL": self.queues["jobs"].queue_url,
            "INBOX_QUEUE_URL": self.queues["inbox"].queue_url,
            "APP_KEY_SECRET": self.secrets["AppPrivateKey"].secret_arn,
            "ANTHROPIC_SECRET": self.secrets["AnthropicApiKey"].secret_arn,
            "APP_ID": app_id,
            "LOG_GROUP": log_group.log_group_name,
            "PIP_SPEC": str(self.node.try_get_context("nkibotPipSpec") or "nkibot"),
            "BEDROCK_MODEL_ID": model,
            "TARGET": family,
        }
        script = USER_DATA.read_text(encoding="utf-8")
        for key, value in values.items():
            script = script.replace(f"@@{key}@@", value)
        unit = UNIT_FILE.read_text(encoding="utf-8")
        return (
            script
            + "cat > /etc/systemd/system/nkibot-runner.service <<'UNIT'\n" + unit + "UNIT\n"
            + "systemctl daemon-reload\nsystemctl enable --now nkibot-runner.service\n"
        )
