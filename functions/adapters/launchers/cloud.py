"""What the SageMaker and EC2 launchers share: tags, the trainer's environment, and the checks that
refuse (422, naming the field) a job a cloud engine cannot run, at submit time as well as at launch.
"""

from __future__ import annotations

from typing import Any, Protocol

from functions.catalog.cloud_rules import validate_cloud_job
from functions.catalog.images import check_custom_image, trainer_image
from functions.catalog.job_names import TAG_ATTEMPT, TAG_JOB_ID, TAG_LABEL_PREFIX, TAG_OWNER, tag_value
from functions.service.ports import CapacityRefused, LaunchRequest, PoolFailure
from functions.settings import Settings
from schemas.job import ErrorType
from schemas.trainer import ENV_ATTEMPT, ENV_JOB_ID, ENV_RUN_SPEC


class ClientSource(Protocol):
    """functions.adapters.aws.AwsClients, or anything that hands out boto3 clients by service name."""

    def client(self, service: str) -> Any: ...


class LaunchCapacityError(CapacityRefused):
    """The engine has no capacity (or quota) for the instance type right now: retry later or elsewhere.

    The lifecycle engine treats it like a preemption before start (requeue), not as the job's fault;
    `failures` (an EC2 Fleet's Errors) go to placement's pool health.
    """

    error_type = ErrorType.CAPACITY

    def __init__(self, instance_type: str, message: str, failures: tuple[PoolFailure, ...] = ()) -> None:
        super().__init__(message, failures)
        self.instance_type = instance_type


def check_request(request: LaunchRequest, platform: str) -> None:
    spec = request.run_spec
    validate_cloud_job(spec.training_config, spec.data_config, spec.resource_config, platform, spec.training_shape)


def run_image(request: LaunchRequest, settings: Settings, platform: str) -> str:
    """The image an attempt runs: the job's own (training_config.image), checked again against the
    deployment's rules now (they may have changed since submit: InvalidRequest fails the launch as the
    job's error), else the deployment's trainer image with the training shape's tag."""
    spec = request.run_spec
    own = spec.training_config.image
    if own:
        check_custom_image("training_config.image", own, settings.custom_image_repositories, platform, local_mode=settings.local_mode)
        return own
    return trainer_image(settings.trainer_image_uri, spec.training_shape) if settings.trainer_image_uri else ""


def launch_environment(request: LaunchRequest) -> dict[str, str]:
    """The job's environment plus the trainer contract: where the run spec is, which job and attempt."""
    env = dict(request.run_spec.training_config.environment)
    env[ENV_RUN_SPEC] = request.run_spec_uri
    env[ENV_JOB_ID] = request.job_id
    env[ENV_ATTEMPT] = str(request.attempt)
    return env


def launch_tags(request: LaunchRequest) -> dict[str, str]:
    tags = {
        TAG_JOB_ID: request.job_id,
        TAG_ATTEMPT: str(request.attempt),
        TAG_OWNER: tag_value(request.owner),
    }
    for key, value in sorted(request.labels.items()):
        tags[f"{TAG_LABEL_PREFIX}{key}"[:128]] = tag_value(value)
    return tags
