"""What a cloud engine (SageMaker, EC2) refuses, checked at submit (422 naming the field) and again at launch."""

from __future__ import annotations

import re

from functions.catalog.instances import PLATFORMS, select_instance
from functions.errors import InvalidRequest
from schemas.bounds import denied_env
from schemas.configs import DataConfig, ModelSource, ResourceConfig, TrainingConfig
from schemas.shapes import TrainingShapeProfile
from schemas.trainer import ENV_ATTEMPT, ENV_JOB_ID, ENV_RUN_SPEC

# The launcher sets these; a job's own environment may not.
RESERVED_ENV = frozenset({ENV_RUN_SPEC, ENV_JOB_ID, ENV_ATTEMPT})
# On a multi-node job the nodes' rendezvous sets these (ec2: user_data.sh; sagemaker: the host list).
RENDEZVOUS_ENV = frozenset({"NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT"})
_MAX_ENV = 100  # SageMaker's Environment limits (EC2 follows the same rules: one contract)
_MAX_ENV_VALUE = 512
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,511}$")


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
