"""SageMakerLauncher: the CreateTrainingJob request, status/error mapping from recorded responses, stop.

botocore's Stubber checks every request against SageMaker's service model and serves recorded
responses (tests/events/sagemaker_describe_*.json), so no AWS and no moto is needed here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.launchers.cloud import LaunchCapacityError
from functions.adapters.launchers.sagemaker import (
    SageMakerLauncher,
    build_training_job_request,
    classify_failure,
    describe_training_job,
)
from functions.catalog.job_names import parse_training_job_name, training_job_name
from functions.errors import InvalidRequest, Unsupported
from functions.service.ports import LaunchHandle, RunState
from schemas.configs import ResourceConfig
from schemas.job import ErrorType
from schemas.trainer import METRIC_DEFINITIONS
from tests.cloud_fixtures import BUCKET, IMAGE, OWNER, ROLE, cloud_settings, load_event, make_launch_request

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


class StubClients:
    def __init__(self, client: Any) -> None:
        self._client = client

    def client(self, service: str) -> Any:
        assert service == "sagemaker"
        return self._client


@pytest.fixture
def stubbed() -> Iterator[tuple[SageMakerLauncher, Stubber]]:
    client = boto3.client("sagemaker", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield SageMakerLauncher(cloud_settings(), StubClients(client)), stubber
        stubber.assert_no_pending_responses()


def test_single_gpu_request() -> None:
    # Given a one-GPU LoRA job on demand
    request = make_launch_request(hyperparameters={"max_steps": "20"})
    # When its CreateTrainingJob request is built
    params = build_training_job_request(request, cloud_settings())
    # Then everything the attempt needs is in it
    assert params["TrainingJobName"] == "tp-job-0a1b2c3d-a1"
    assert params["RoleArn"] == ROLE
    assert params["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert params["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    assert params["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30}
    assert params["HyperParameters"] == {"run_spec": request.run_spec_uri, "max_steps": "20"}
    assert params["Environment"]["TRAINPLANE_RUN_SPEC"] == request.run_spec_uri
    assert params["Environment"]["TRAINPLANE_JOB_ID"] == "job-0a1b2c3d"
    assert params["Environment"]["TRAINPLANE_ATTEMPT"] == "1"
    assert params["CheckpointConfig"] == {"S3Uri": f"s3://{BUCKET}/jobs/job-0a1b2c3d/checkpoints", "LocalPath": "/opt/ml/checkpoints"}
    assert params["OutputDataConfig"] == {"S3OutputPath": f"s3://{BUCKET}/jobs/job-0a1b2c3d/output/"}
    assert params["StoppingCondition"] == {"MaxRuntimeInSeconds": 86_400}
    assert params["EnableManagedSpotTraining"] is False
    assert params["InputDataConfig"][0]["ChannelName"] == "source_0"
    assert params["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://team-data/support/train.jsonl"
    tags = {t["Key"]: t["Value"] for t in params["Tags"]}
    assert tags["trainplane:job-id"] == "job-0a1b2c3d" and tags["trainplane:attempt"] == "1" and tags["trainplane:owner"] == OWNER
    assert tags["trainplane:label:team"] == "support"
    assert tags["trainplane:label:experiment"] == "lr sweep/3"
    assert "VpcConfig" not in params and "KmsKeyId" not in params["OutputDataConfig"]


def test_eight_h100_spot_request() -> None:
    # Given an 8 x H100 preemptible job with a 10 h limit, in a deployment with a warm pool configured
    request = make_launch_request(preemptible=True, max_runtime_seconds=36_000, resources=ResourceConfig(gpu_count=8, gpu_type="H100"))
    settings = cloud_settings(sagemaker_keep_alive_seconds=600, spot_extra_wait_seconds=7200)
    # When built
    params = build_training_job_request(request, settings)
    # Then it is managed spot on p5, waiting at most the runtime plus the extra wait, and no warm pool
    assert params["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge"
    assert params["EnableManagedSpotTraining"] is True
    assert params["StoppingCondition"] == {"MaxRuntimeInSeconds": 36_000, "MaxWaitTimeInSeconds": 43_200}
    assert "KeepAlivePeriodInSeconds" not in params["ResourceConfig"]


def test_multi_node_request_with_vpc_kms_and_warm_pool() -> None:
    # Given a 4-node A100-80GB on-demand job in a deployment with VPC, KMS and a warm pool
    request = make_launch_request(resources=ResourceConfig(gpu_count=8, gpu_type="A100-80GB", node_count=4, storage_min_mb=200_000))
    settings = cloud_settings(
        vpc_subnet_ids=("subnet-a", "subnet-b"),
        vpc_security_group_ids=("sg-1",),
        kms_key_id="alias/trainplane",
        sagemaker_keep_alive_seconds=900,
    )
    # When built
    params = build_training_job_request(request, settings)
    # Then the nodes become the instance count, traffic between them is encrypted, output is KMS-encrypted
    rc = params["ResourceConfig"]
    assert (rc["InstanceType"], rc["InstanceCount"], rc["VolumeSizeInGB"]) == ("ml.p4de.24xlarge", 4, 196)
    assert rc["KeepAlivePeriodInSeconds"] == 900
    assert "VolumeKmsKeyId" not in rc  # p4de has local NVMe: SageMaker refuses a volume key there
    assert params["VpcConfig"] == {"Subnets": ["subnet-a", "subnet-b"], "SecurityGroupIds": ["sg-1"]}
    assert params["OutputDataConfig"]["KmsKeyId"] == "alias/trainplane"
    assert params["EnableInterContainerTrafficEncryption"] is True


def test_cpu_only_request_encrypts_its_volume() -> None:
    # Given a CPU-only job with two data sources in a KMS deployment
    request = make_launch_request(resources=ResourceConfig(gpu_count=0), sources=("s3://d/train.jsonl", "s3://d/valid.jsonl"))
    # When built
    params = build_training_job_request(request, cloud_settings(kms_key_id="key-1"))
    # Then it runs on the cheapest CPU type, its EBS volume is encrypted, each source is a channel
    assert params["ResourceConfig"]["InstanceType"] == "ml.m5.large"
    assert params["ResourceConfig"]["VolumeKmsKeyId"] == "key-1"
    assert [c["ChannelName"] for c in params["InputDataConfig"]] == ["source_0", "source_1"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"resources": ResourceConfig(gpu_count=16, gpu_type="H100")}, "resource_config.gpu_count"),
        ({"sources": ("/home/alice/train.jsonl",)}, "data_config.sources[0].path"),
        ({"environment": {"TRAINPLANE_RUN_SPEC": "x"}}, "training_config.environment.TRAINPLANE_RUN_SPEC"),
        ({"environment": {"1BAD": "x"}}, "training_config.environment.1BAD"),
        ({"environment": {"BIG": "x" * 600}}, "training_config.environment.BIG"),
    ],
)
def test_requests_sagemaker_cannot_run_are_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    # Given a job no SageMaker training job can run / When its request is built
    with pytest.raises(InvalidRequest) as caught:
        build_training_job_request(make_launch_request(**kwargs), cloud_settings())
    # Then the error names the offending field (the API's 422)
    assert caught.value.field == field


def test_missing_deployment_settings_are_unsupported() -> None:
    # Given a deployment without a role, or with half a VPC config / Then launching is refused clearly
    with pytest.raises(Unsupported, match="sagemaker_role_arn"):
        build_training_job_request(make_launch_request(), cloud_settings(sagemaker_role_arn=None))
    with pytest.raises(Unsupported, match="together"):
        build_training_job_request(make_launch_request(), cloud_settings(vpc_subnet_ids=("subnet-a",)))


@pytest.mark.parametrize(
    "job_id",
    ["job-0a1b2c3d", "01JD4W7ZQ8X2M3N4P5R6S7T8V9", "a" * 58, "a" * 70, "Job_With.Odd:Chars", "--", "x" * 200],
)
def test_training_job_names_are_valid_unique_and_parse_back(job_id: str) -> None:
    # Given job ids of many shapes / When named for attempts 1 and 12
    first, twelfth = training_job_name(job_id, 1), training_job_name(job_id, 12)
    # Then names are valid SageMaker names, differ by attempt, and parse back when the id fits as it is
    for name in (first, twelfth):
        assert NAME_PATTERN.match(name) and len(name) <= 63, name
    assert first != twelfth
    parsed = parse_training_job_name(twelfth)
    assert parsed is None or parsed == (job_id, 12)
    if re.fullmatch(r"[A-Za-z0-9-]{1,50}", job_id) and not job_id.startswith("-") and "--" not in job_id:
        assert parsed == (job_id, 12)
    assert training_job_name("a" * 70, 1) != training_job_name("a" * 71, 1)


def test_launch_sends_a_request_sagemaker_accepts(stubbed: tuple[SageMakerLauncher, Stubber]) -> None:
    # Given an 8 x H100 spot job and SageMaker's model of CreateTrainingJob (the Stubber validates against it)
    launcher, stubber = stubbed
    request = make_launch_request(preemptible=True, resources=ResourceConfig(gpu_count=8, gpu_type="H100", node_count=2))
    expected = build_training_job_request(request, cloud_settings())
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-job/tp-job-0a1b2c3d-a1"
    stubber.add_response("create_training_job", {"TrainingJobArn": arn}, expected)
    # When launched
    handle = launcher.launch(request)
    # Then the handle finds the run again and records what the cost needs
    assert (handle.launcher, handle.run_id, handle.attempt) == ("sagemaker", "tp-job-0a1b2c3d-a1", 1)
    assert handle.extra["arn"] == arn
    assert (handle.extra["instance_type"], handle.extra["instance_count"], handle.extra["spot"]) == ("ml.p5.48xlarge", "2", "true")
    assert LaunchHandle.from_dict(handle.to_dict()) == handle


def test_a_retried_launch_returns_the_existing_run(stubbed: tuple[SageMakerLauncher, Stubber]) -> None:
    # Given the attempt's training job already exists (the Launch task was retried)
    launcher, stubber = stubbed
    stubber.add_client_error("create_training_job", "ResourceInUse", "Training job names must be unique within an AWS account and region")
    stubber.add_response("describe_training_job", load_event("sagemaker_describe_training"), {"TrainingJobName": "tp-job-0a1b2c3d-a1"})
    # When launched again / Then it is the same run, not a second one
    handle = launcher.launch(make_launch_request())
    assert handle.run_id == "tp-job-0a1b2c3d-a1"


def test_a_quota_refusal_is_a_capacity_error(stubbed: tuple[SageMakerLauncher, Stubber]) -> None:
    # Given the account's quota for the type is used up / When launched / Then the lifecycle gets a capacity error
    launcher, stubber = stubbed
    quota = "The account-level service limit 'ml.g5.xlarge for training job usage' is 0"
    stubber.add_client_error("create_training_job", "ResourceLimitExceeded", quota)
    with pytest.raises(LaunchCapacityError) as caught:
        launcher.launch(make_launch_request())
    assert caught.value.error_type == ErrorType.CAPACITY and caught.value.instance_type == "ml.g5.xlarge"


@pytest.mark.parametrize(
    ("recorded", "state", "error_type"),
    [
        ("sagemaker_describe_training", RunState.RUNNING, None),
        ("sagemaker_describe_completed_spot", RunState.COMPLETED, None),
        ("sagemaker_describe_failed_oom", RunState.FAILED, ErrorType.OUT_OF_MEMORY),
        ("sagemaker_describe_capacity_error", RunState.PREEMPTED, ErrorType.CAPACITY),
        ("sagemaker_describe_spot_interrupted", RunState.STARTING, None),
        ("sagemaker_describe_spot_max_wait", RunState.PREEMPTED, ErrorType.PREEMPTED),
        ("sagemaker_describe_stopped", RunState.STOPPED, None),
        ("sagemaker_describe_max_runtime", RunState.FAILED, ErrorType.TIMEOUT),
    ],
)
def test_describe_maps_recorded_responses(
    stubbed: tuple[SageMakerLauncher, Stubber], recorded: str, state: RunState, error_type: ErrorType | None
) -> None:
    # Given a recorded DescribeTrainingJob response (validated against SageMaker's output shape)
    launcher, stubber = stubbed
    response = load_event(recorded)
    stubber.add_response("describe_training_job", response, {"TrainingJobName": response["TrainingJobName"]})
    # When the launcher describes the run
    description = launcher.describe(LaunchHandle("sagemaker", response["TrainingJobName"], 1))
    # Then the run state and error type follow the status, secondary status and failure reason
    assert (description.state, description.error_type) == (state, error_type)
    assert description.secondary_status == response["SecondaryStatus"]
    assert description.instance_type == response["ResourceConfig"]["InstanceType"]


def test_describe_records_billable_and_run_seconds_for_spot() -> None:
    # Given a finished managed-spot job on two p5 nodes / When mapped
    description = describe_training_job(load_event("sagemaker_describe_completed_spot"))
    # Then SageMaker's own billable figure (less than the run time: the spot saving) is kept
    assert (description.billable_seconds, description.run_seconds) == (3240.0, 10800.0)
    assert (description.instance_count, description.spot) == (2, True)


def test_describe_of_a_missing_job_is_unknown(stubbed: tuple[SageMakerLauncher, Stubber]) -> None:
    # Given a training job that does not exist / When described / Then UNKNOWN, not an exception
    launcher, stubber = stubbed
    stubber.add_client_error("describe_training_job", "ValidationException", "Requested resource not found.")
    assert launcher.describe(LaunchHandle("sagemaker", "tp-gone-a1", 1)).state == RunState.UNKNOWN


@pytest.mark.parametrize(
    ("failure", "secondary", "expected"),
    [
        ("AlgorithmError: DataError: s3://d/x.jsonl:3: bad JSON", "Failed", (RunState.FAILED, ErrorType.DATA_ERROR)),
        ("UserError: lora_rank must be > 0", "Failed", (RunState.FAILED, ErrorType.USER_ERROR)),
        ("AlgorithmError: InternalError: KeyError: 'x'", "Failed", (RunState.FAILED, ErrorType.INTERNAL)),
        ("AlgorithmError: Preempted: host going away", "Failed", (RunState.PREEMPTED, ErrorType.PREEMPTED)),
        ("AlgorithmError: Traceback (most recent call last) ..., exit code: 71", "Failed", (RunState.FAILED, ErrorType.OUT_OF_MEMORY)),
        ("AlgorithmError: something the user code raised", "Failed", (RunState.FAILED, ErrorType.USER_ERROR)),
        ("ClientError: Data download failed: no objects under s3://d/x", "Failed", (RunState.FAILED, ErrorType.DATA_ERROR)),
        ("ClientError: Cannot access ECR image", "Failed", (RunState.FAILED, ErrorType.USER_ERROR)),
        ("InsufficientCapacityError: no p5 capacity in us-east-1", "Failed", (RunState.PREEMPTED, ErrorType.CAPACITY)),
        ("InternalServerError: We encountered an internal error. Please try again.", "Failed", (RunState.FAILED, ErrorType.INTERNAL)),
        (None, "MaxRuntimeExceeded", (RunState.FAILED, ErrorType.TIMEOUT)),
        (None, "Interrupted", (RunState.PREEMPTED, ErrorType.PREEMPTED)),
    ],
)
def test_failure_reasons_are_classified(failure: str | None, secondary: str, expected: tuple[RunState, ErrorType]) -> None:
    # Given SageMaker's FailureReason / Then it maps to a run state and the job's error type
    assert classify_failure(failure, secondary) == expected


def test_stop_is_stop_training_job_and_idempotent(stubbed: tuple[SageMakerLauncher, Stubber]) -> None:
    # Given a running job, then one that already ended, then a throttled API
    launcher, stubber = stubbed
    handle = LaunchHandle("sagemaker", "tp-job-0a1b2c3d-a1", 1)
    stubber.add_response("stop_training_job", {}, {"TrainingJobName": handle.run_id})
    ended = "The request was rejected because the training job is in status Stopped."
    stubber.add_client_error("stop_training_job", "ValidationException", ended)
    stubber.add_client_error("stop_training_job", "ThrottlingException", "Rate exceeded")
    # When stopped three times / Then the first two are fine and a real error is not swallowed
    launcher.stop(handle)
    launcher.stop(handle, graceful=False)
    with pytest.raises(Exception, match="Rate exceeded"):
        launcher.stop(handle)
