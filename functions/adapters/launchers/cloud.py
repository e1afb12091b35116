"""What the SageMaker and EC2 launchers share: tags, the trainer's environment, and the checks that
refuse (422, naming the field) a job a cloud engine cannot run, at submit time as well as at launch.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from functions.adapters.launchers.base import LaunchRequest
from functions.adapters.launchers.images import check_custom_image
from functions.adapters.launchers.instances import PLATFORMS, select_instance
from functions.errors import InvalidRequest
from functions.settings import Settings
from schemas.bounds import denied_env
from schemas.configs import DataConfig, ModelSource, ResourceConfig, TrainingConfig
from schemas.job import ErrorType
from schemas.shapes import TrainingShapeProfile
from schemas.trainer import ENV_ATTEMPT, ENV_JOB_ID, ENV_RUN_SPEC

# Tags on every training job / instance: the events handler finds the job and attempt from them.
TAG_JOB_ID = "trainplane:job-id"
TAG_ATTEMPT = "trainplane:attempt"
TAG_OWNER = "trainplane:owner"
TAG_LABEL_PREFIX = "trainplane:label:"
# EC2 only: the control plane's requests to the instance's watcher (see ec2.py and user_data.sh).
TAG_STOP = "trainplane:stop"
TAG_INTERRUPTED = "trainplane:interrupted"

# The launcher sets these; a job's own environment may not.
RESERVED_ENV = frozenset({ENV_RUN_SPEC, ENV_JOB_ID, ENV_ATTEMPT})
# On a multi-node job the nodes' rendezvous sets these (ec2: user_data.sh; sagemaker: the host list).
RENDEZVOUS_ENV = frozenset({"NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT"})
_MAX_ENV = 100  # SageMaker's Environment limits (EC2 follows the same rules: one contract)
_MAX_ENV_VALUE = 512
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,511}$")
# SageMaker tag values: letters, digits, spaces and _ . : / = + - @ (EC2 is laxer; one rule for both).
_TAG_VALUE_BAD = re.compile(r"[^\w\s.:/=+\-@]")


class ClientSource(Protocol):
    """functions.adapters.aws.AwsClients, or anything that hands out boto3 clients by service name."""

    def client(self, service: str) -> Any: ...


class LaunchCapacityError(RuntimeError):
    """The engine has no capacity (or quota) for the instance type right now: retry later or elsewhere.

    The lifecycle engine treats it like a preemption before start (requeue), not as the job's fault.
    """

    error_type = ErrorType.CAPACITY

    def __init__(self, instance_type: str, message: str) -> None:
        super().__init__(message)
        self.instance_type = instance_type


def validate_cloud_job(
    training: TrainingConfig, data: DataConfig, resources: ResourceConfig, compute: str, shape: TrainingShapeProfile | None = None
) -> None:
    """Submit-time check for compute 'sagemaker' | 'ec2' (a no-op for 'local'): InvalidRequest naming the field."""
    if compute not in PLATFORMS:
        return
    select_instance(resources, compute, shape)
    for i, source in enumerate(data.sources):
        if not source.path.startswith("s3://"):
            message = f"compute '{compute}' reads training data from S3 only; got {source.path!r}"
            raise InvalidRequest(f"data_config.sources[{i}].path", message)
    if training.base_model.resolved_source() == ModelSource.LOCAL:
        message = f"a local model path cannot be read on compute '{compute}'; use s3:// or a hub id"
        raise InvalidRequest("training_config.base_model.model_id", message)
    env = training.environment
    denied = denied_env(env)  # submit refused it; a job stored before the rule is refused at launch
    if denied:
        raise InvalidRequest(*denied)
    if len(env) > _MAX_ENV - len(RESERVED_ENV) - 1:
        raise InvalidRequest("training_config.environment", f"at most {_MAX_ENV - len(RESERVED_ENV) - 1} variables on compute '{compute}'")
    for key, value in env.items():
        if key in RESERVED_ENV:
            raise InvalidRequest(f"training_config.environment.{key}", "reserved: the control plane sets it")
        if key in RENDEZVOUS_ENV and resources.node_count > 1:
            raise InvalidRequest(f"training_config.environment.{key}", "reserved on a multi-node job: the nodes' rendezvous sets it")
        if not _ENV_KEY.match(key):
            raise InvalidRequest(f"training_config.environment.{key}", "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if len(value) > _MAX_ENV_VALUE:
            raise InvalidRequest(f"training_config.environment.{key}", f"at most {_MAX_ENV_VALUE} characters")


def check_request(request: LaunchRequest, platform: str) -> None:
    spec = request.run_spec
    validate_cloud_job(spec.training_config, spec.data_config, spec.resource_config, platform, spec.training_shape)


def trainer_image(image_uri: str, shape: TrainingShapeProfile | None) -> str:
    """The deployment's trainer image, with the training shape's tag when it names one."""
    if shape is None or not shape.trainer_image_tag:
        return image_uri
    repository = image_uri.split("@", 1)[0]  # a digest pins another build: the shape's tag replaces it
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[: repository.rfind(":")]
    return f"{repository}:{shape.trainer_image_tag}"


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


def tag_value(value: str) -> str:
    return _TAG_VALUE_BAD.sub("_", value)[:256]


def job_ref_from_tags(tags: dict[str, str]) -> tuple[str, int] | None:
    """(job_id, attempt) from a resource's tags, None when they are not ours."""
    job_id, attempt = tags.get(TAG_JOB_ID), tags.get(TAG_ATTEMPT)
    if job_id and attempt and attempt.isdigit():
        return job_id, int(attempt)
    return None
