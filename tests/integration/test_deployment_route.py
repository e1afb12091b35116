"""GET /deployment on the API Lambda: what `trainplane doctor` learns from the function that runs the API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions import composition
from functions.adapters.aws import AwsClients
from schemas.deployment import DeploymentInfo
from tests.fakes import RecordingWorkflow
from tests.helpers.api_lambda import Api
from tests.helpers.aws import fresh_resources
from tests.helpers.jobs import ALICE
from trainplane.doctor.checks import installed_fingerprint

ACCOUNT = "123456789012"
IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets:abc123"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"


@pytest.fixture
def sagemaker_api(aws: AwsClients) -> Iterator[Api]:
    settings = fresh_resources(aws, compute="sagemaker", trainer_image_uri=IMAGE)
    composition.configure(settings=settings, clients=aws, workflow=RecordingWorkflow())
    try:
        yield Api(aws, RecordingWorkflow(), settings)
    finally:
        composition.reset()


def test_get_deployment_names_the_running_code_the_engine_and_every_instance_type(sagemaker_api: Api) -> None:
    # When a signed caller asks the API function about the deployment
    reply = sagemaker_api("api_get_deployment")
    # Then it names the code it runs, as the installed client computes it over the same files
    assert reply.status == 200, reply.body
    info = DeploymentInfo.model_validate(reply.body)
    assert info.code_fingerprint == installed_fingerprint()
    # And the engine's instance types: the defaults (1 GPU, a CPU job) and every shape's pinned type
    used = {use.instance_type: use for use in info.instance_types}
    assert any("default resources" in who for use in used.values() for who in use.used_by)
    assert any(use.gpus == 0 and "a CPU job (gpu_count 0)" in use.used_by for use in used.values())
    assert "training shape h100-8x@1" in used["ml.p5.48xlarge"].used_by
    assert all(name.startswith("ml.") for name in used)
    # And the trainer image, SageMaker's log group, and the caller's own data area
    assert info.trainer_images == [IMAGE] and info.image_platforms == ["linux/amd64"]
    assert info.trainer_log_group == LOG_GROUP
    assert info.caller_arn == ALICE
    assert info.caller_data_uri == f"s3://{sagemaker_api.settings.artifacts_bucket}/data/{ACCOUNT}/user/alice/"


def test_get_deployment_without_an_iam_caller_is_403(call: Api) -> None:
    assert call("api_get_deployment", user_arn="").status == 403
