"""`trainplane doctor` against a cloud-shaped deployment in moto: the boto3 adapters the cloud uses
(CloudFormation, DynamoDB, S3, EventBridge, Step Functions, ECR, CloudWatch Logs, Cognito, CloudFront),
with fakes only where moto has no service (IAM policy simulation, Service Quotas). Each failure test
breaks one thing of a healthy deployment and expects exactly that line to fail, with its fix.

GET /deployment (what the doctor learns from the API function): test_deployment_route.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import warnings
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.catalog.shapes import DEFAULT_SHAPES
from functions.service.deployment import instance_uses
from schemas.deployment import DeploymentInfo
from trainplane.doctor import Mark, Report, Target, diagnose
from trainplane.doctor.aws import AwsSession, aws_ports, policy_source
from trainplane.doctor.checks import installed_fingerprint
from trainplane.doctor.ports import Ports, Quota
from trainplane.doctor.quotas import needs
from trainplane.doctor.statemachine import differences, repository_definition

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "Trainplane-test"
CALLER = f"arn:aws:iam::{ACCOUNT}:user/deployer"
REPOSITORY = "cdk-hnb659fds-container-assets"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}:abc123"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
OUR_FILTER = "trainplane-test-trainer-reports"


# --- the checklist against moto ---------------------------------------------------------------------


class FakeQuotas:
    """Service Quotas (moto has none): every quota ample unless set here."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def quotas(self, service_code: str) -> list[Quota]:
        return [
            Quota(code=f"L-{abs(hash(n.quota_name)) % 10**8:08d}", name=n.quota_name, value=self.values.get(n.quota_name, 1000.0))
            for n in needs(instance_uses("sagemaker", list(DEFAULT_SHAPES)))
            if n.service_code == service_code
        ]


class FakeSimulator:
    """IAM policy simulation (moto has none): allows all but `denied`."""

    def __init__(self) -> None:
        self.denied: list[str] = []
        self.asked: list[tuple[str, list[str], str]] = []

    def denied_actions(self, caller_arn: str, actions: list[str], resource_arn: str) -> list[str] | None:
        self.asked.append((caller_arn, actions, resource_arn))
        return [a for a in actions if a in self.denied]


class FakeApi:
    def __init__(self, info: DeploymentInfo) -> None:
        self.value = info

    def info(self) -> DeploymentInfo:
        return self.value


@dataclasses.dataclass
class Deployment:
    ports: Ports
    quotas: FakeQuotas
    simulator: FakeSimulator
    api: FakeApi
    outputs: dict[str, str]
    function_arn: str

    def check(self) -> Report:
        return diagnose(self.ports, Target(stack=STACK, region=REGION, filter_name=OUR_FILTER), api=self.api)  # type: ignore[arg-type]

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION)


def _manifest_list(*platforms: str) -> str:
    entries = []
    for n, platform in enumerate(platforms):
        os_name, arch = platform.split("/")
        entries.append(
            {
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "size": 1,
                "digest": "sha256:" + f"{n}" * 64,
                "platform": {"os": os_name, "architecture": arch},
            }
        )
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json", "manifests": entries})


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    """A healthy SageMaker deployment as the stack leaves it, in a fresh moto."""
    with mock_aws():
        c: Callable[[str], Any] = lambda service: boto3.client(service, region_name=REGION)  # noqa: E731
        c("dynamodb").create_table(
            TableName="trainplane-test-jobs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        c("s3").create_bucket(Bucket="trainplane-test-artifacts")
        role = c("iam").create_role(RoleName="lifecycle", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as z:
            z.writestr("handler.py", "def handler(event, context): return None\n")
        function_arn = c("lambda").create_function(
            FunctionName="trainplane-test-events",
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": code.getvalue()},
        )["FunctionArn"]
        _, template = repository_definition()
        machine = c("stepfunctions").create_state_machine(
            name="trainplane-test-lifecycle", definition=template.replace("${LifecycleFunctionArn}", function_arn), roleArn=role
        )["stateMachineArn"]
        c("ecr").create_repository(repositoryName=REPOSITORY)
        c("ecr").put_image(repositoryName=REPOSITORY, imageManifest=_manifest_list("linux/amd64"), imageTag="abc123")
        c("logs").create_log_group(logGroupName=LOG_GROUP)
        c("logs").put_subscription_filter(
            logGroupName=LOG_GROUP, filterName=OUR_FILTER, filterPattern='"TRAINPLANE_EVENT"', destinationArn=function_arn
        )
        pool = c("cognito-idp").create_user_pool(PoolName="dashboard")["UserPool"]["Id"]
        distribution = c("cloudfront").create_distribution(
            DistributionConfig={
                "CallerReference": "dashboard",
                "Origins": {
                    "Quantity": 1,
                    "Items": [{"Id": "o", "DomainName": "assets.s3.amazonaws.com", "S3OriginConfig": {"OriginAccessIdentity": ""}}],
                },
                "DefaultCacheBehavior": {"TargetOriginId": "o", "ViewerProtocolPolicy": "redirect-to-https"},
                "Comment": "",
                "Enabled": True,
            }
        )["Distribution"]["Id"]
        outputs = {
            "ApiUrl": "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/",
            "ArtifactsBucketName": "trainplane-test-artifacts",
            "JobsTableName": "trainplane-test-jobs",
            "StateMachineArn": machine,
            "TrainerImageUri": IMAGE,
            "DashboardUserPoolId": pool,
            "DashboardDistributionId": distribution,
        }
        warnings.filterwarnings("ignore", message=".*WaitConditionHandle.*")  # moto does not model it: nothing to model
        c("cloudformation").create_stack(
            StackName=STACK,
            TemplateBody=json.dumps(
                {
                    "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
                    "Outputs": {k: {"Value": v} for k, v in outputs.items()},
                }
            ),
        )
        info = DeploymentInfo(
            code_fingerprint=installed_fingerprint() or "",
            compute="sagemaker",
            region=REGION,
            event_bus_name="default",
            trainer_log_group=LOG_GROUP,
            trainer_images=[IMAGE],
            image_platforms=["linux/amd64"],
            instance_types=instance_uses("sagemaker", list(DEFAULT_SHAPES)),
            caller_arn=CALLER,
            caller_data_uri="s3://trainplane-test-artifacts/data/123456789012/user/deployer/",
        )
        api, quotas, simulator = FakeApi(info), FakeQuotas(), FakeSimulator()
        ports = dataclasses.replace(aws_ports(AwsSession(region=REGION), api), quotas=quotas, simulator=simulator)
        yield Deployment(ports, quotas, simulator, api, outputs, function_arn)


def _line(report: Report, name: str) -> Any:
    return next(c for c in report.checks if c.name == name)


def test_a_healthy_deployment_passes_every_check(deployment: Deployment) -> None:
    # Given a deployment as the stack leaves it  When the doctor checks it
    report = deployment.check()
    # Then every line passes (nothing is skipped: the cloud has every part) and the API's ARN was simulated
    assert [(c.name, c.mark) for c in report.checks if c.mark is not Mark.PASS] == []
    assert report.ok
    caller, actions, resource = deployment.simulator.asked[0]
    assert actions == ["execute-api:Invoke"]
    assert resource == f"arn:aws:execute-api:{REGION}:{ACCOUNT}:a1b2c3d4e5/v1/GET/deployment"
    assert caller.startswith("arn:aws:") and json.loads(json.dumps(report.to_dict()))["ok"] is True


def _drop_table(d: Deployment) -> None:
    d.client("dynamodb").delete_table(TableName=d.outputs["JobsTableName"])


def _drift_state_machine(d: Deployment) -> None:
    _, template = repository_definition()
    changed = json.loads(template.replace("${LifecycleFunctionArn}", d.function_arn))
    changed["TimeoutSeconds"] = 1
    d.client("stepfunctions").update_state_machine(stateMachineArn=d.outputs["StateMachineArn"], definition=json.dumps(changed))


def _arm_only_image(d: Deployment) -> None:
    d.client("ecr").batch_delete_image(repositoryName=REPOSITORY, imageIds=[{"imageTag": "abc123"}])
    d.client("ecr").put_image(repositoryName=REPOSITORY, imageManifest=_manifest_list("linux/arm64"), imageTag="abc123")


def _no_image(d: Deployment) -> None:
    d.client("ecr").batch_delete_image(repositoryName=REPOSITORY, imageIds=[{"imageTag": "abc123"}])


def _full_log_group(d: Deployment) -> None:
    logs = d.client("logs")
    logs.delete_subscription_filter(logGroupName=LOG_GROUP, filterName=OUR_FILTER)
    for name in ("team-a-audit", "team-b-siem"):
        logs.put_subscription_filter(logGroupName=LOG_GROUP, filterName=name, filterPattern="", destinationArn=d.function_arn)


def _no_log_group(d: Deployment) -> None:
    d.client("logs").delete_log_group(logGroupName=LOG_GROUP)


def _zero_quota(d: Deployment) -> None:
    d.quotas.values["ml.p5.48xlarge for training job usage"] = 0


def _denied(d: Deployment) -> None:
    d.simulator.denied = ["execute-api:Invoke"]


def _other_code(d: Deployment) -> None:
    d.api.value = d.api.value.model_copy(update={"code_fingerprint": "0000000000000000"})


def _no_user_pool(d: Deployment) -> None:
    d.client("cognito-idp").delete_user_pool(UserPoolId=d.outputs["DashboardUserPoolId"])


def _no_bucket(d: Deployment) -> None:
    d.client("s3").delete_bucket(Bucket=d.outputs["ArtifactsBucketName"])


@pytest.mark.parametrize(
    ("breaks", "line", "says", "fix"),
    [
        (_drop_table, "jobs table", "table trainplane-test-jobs does not exist", "make deploy"),
        (_no_bucket, "artifacts bucket", "bucket trainplane-test-artifacts does not exist", "make deploy"),
        (_drift_state_machine, "state machine", "$.TimeoutSeconds: not in the repository's definition", "deploy this version's definition"),
        (_arm_only_image, "trainer image in ECR", "offers linux/arm64, not linux/amd64", "--platform linux/amd64"),
        (_no_image, "trainer image in ECR", f"{IMAGE} is not in ECR", "make deploy"),
        (
            _full_log_group,
            "trainer reports' log group",
            "no free subscription-filter slot (taken by team-a-audit, team-b-siem)",
            "delete-subscription-filter",
        ),
        (_no_log_group, "trainer reports' log group", f"{LOG_GROUP} does not exist", f"create-log-group --log-group-name {LOG_GROUP}"),
        (
            _zero_quota,
            "instance quotas (Service Quotas)",
            "ml.p5.48xlarge for training job usage = 0 (needs 1 instances",
            "request-service-quota-increase",
        ),
        (_denied, "may call the API (IAM simulation)", f"{CALLER} may not execute-api:Invoke", '"Action": "execute-api:Invoke"'),
        (_other_code, "Lambda code version", "runs code 0000000000000000", "install the version that was deployed"),
        (_no_user_pool, "dashboard (Cognito, CloudFront)", "does not exist", "make deploy"),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_a_broken_part_fails_its_own_line_with_the_fix(
    deployment: Deployment, breaks: Callable[[Deployment], None], line: str, says: str, fix: str
) -> None:
    # Given a healthy deployment with one thing broken
    deployment.ports = dataclasses.replace(deployment.ports, identity=_Caller())
    breaks(deployment)
    # When the doctor checks it
    report = deployment.check()
    # Then that line, and only that line, fails: saying what is wrong and what to do
    assert not report.ok
    assert [c.name for c in report.failures()] == [line]
    failed = _line(report, line)
    assert says in failed.detail and fix in failed.fix, failed


class _Caller:
    def caller_arn(self) -> str:
        return CALLER


def test_a_quota_at_0_for_a_type_declared_unused_is_not_required(deployment: Deployment) -> None:
    # Given no H100 quota, and a team that said it will not use that type
    deployment.quotas.values["ml.p5.48xlarge for training job usage"] = 0
    target = Target(stack=STACK, region=REGION, filter_name=OUR_FILTER, unused_instance_types=frozenset({"ml.p5.48xlarge"}))
    # When the doctor checks  Then the quotas line passes, saying one type was left out
    report = diagnose(deployment.ports, target, api=deployment.api)  # type: ignore[arg-type]
    line = _line(report, "instance quotas (Service Quotas)")
    assert line.mark is Mark.PASS and "1 declared unused" in line.detail


def test_the_smoke_job_waits_for_the_other_failures_to_be_fixed(deployment: Deployment) -> None:
    # Given a deployment whose jobs table is gone
    _drop_table(deployment)
    # When the doctor is asked for a smoke test too
    report = diagnose(deployment.ports, Target(stack=STACK, region=REGION, filter_name=OUR_FILTER), api=deployment.api, smoke=True)  # type: ignore[arg-type]
    # Then no job is submitted: the last line says why
    last = report.checks[-1]
    assert (last.name, last.mark) == ("smoke job", Mark.SKIP) and "jobs table" in last.detail
    assert report.smoke is None and not report.ok


def test_without_the_stack_the_resource_checks_wait_for_it_and_the_account_checks_still_run(deployment: Deployment) -> None:
    # Given an account where the stack was never deployed (and so no API answers)
    deployment.client("cloudformation").delete_stack(StackName=STACK)

    class NoApi:
        def info(self) -> DeploymentInfo:
            raise ConnectionError("no API")

    deployment.ports = dataclasses.replace(deployment.ports, api=NoApi())
    # When the doctor checks it
    report = deployment.check()
    # Then the outputs line fails with the deploy command, the resource lines wait for it,
    # and SageMaker's log group is still checked: a deploy would fail on it
    assert _line(report, "stack outputs").mark is Mark.FAIL and "make deploy" in _line(report, "stack outputs").fix
    assert _line(report, "jobs table").mark is Mark.SKIP
    assert _line(report, "trainer reports' log group").mark is Mark.PASS


# --- the pieces ------------------------------------------------------------------------------------


def test_the_definition_check_binds_each_placeholder_to_one_value() -> None:
    # Given the repository's definition rendered with two different ARNs for the one placeholder
    _, template = repository_definition()
    one = template.replace("${LifecycleFunctionArn}", "arn:aws:lambda:us-east-1:1:function:a")
    assert differences(one, template) == []
    first = one.find("arn:aws:lambda:us-east-1:1:function:a")
    mixed = one[:first] + one[first:].replace("function:a", "function:b", 1)
    # Then the second spelling is a difference
    assert differences(mixed, template)


def test_ec2_quotas_count_vcpus_per_family_group() -> None:
    uses = instance_uses("ec2", list(DEFAULT_SHAPES))
    by_name = {n.quota_name: n for n in needs(uses)}
    g = by_name["Running On-Demand G and VT instances"]
    assert g.quota_code == "L-DB2E81BA" and g.unit == "vCPUs" and "g6e.12xlarge" in g.used_by
    assert g.amount == max(u.vcpus * u.instances for u in uses if u.instance_type.startswith("g"))
    assert by_name["Running On-Demand P instances"].amount == 192  # p5.48xlarge
    assert "m5.2xlarge" in by_name["Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"].used_by


def test_an_assumed_role_session_is_simulated_as_its_role() -> None:
    assert policy_source(f"arn:aws:sts::{ACCOUNT}:assumed-role/Deployer/alice") == f"arn:aws:iam::{ACCOUNT}:role/Deployer"
    assert policy_source(CALLER) == CALLER
