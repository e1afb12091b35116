"""Settings: one pydantic model, read once from the environment (TRAINPLANE_*), never at import time."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from functions import constants
from schemas.access import BucketGrant

PREFIX = "TRAINPLANE_"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str = constants.LOCAL_REGION
    jobs_table: str = constants.JOBS_TABLE
    idempotency_table: str = constants.IDEMPOTENCY_TABLE
    artifacts_bucket: str = constants.ARTIFACTS_BUCKET
    state_machine_arn: str | None = None
    event_bus_name: str = constants.EVENT_BUS_NAME
    # The deployment's own bus, where the control plane's events go (docs/EVENTS.md).
    trainplane_bus_name: str = constants.TRAINPLANE_BUS_NAME
    # The dashboard's address (events link to a job's page there); None: events carry no link.
    dashboard_url: str | None = None
    # Webhook delivery (functions/service/webhook_delivery.py): the seconds before each attempt after the
    # previous one, comma-separated in TRAINPLANE_WEBHOOK_RETRY_DELAYS; empty: the documented schedule
    # (at once, 5 s, 5 min ... 24 h). Tests shorten it; a deployment has no reason to.
    webhook_retry_delays: tuple[float, ...] = ()
    # Principals (IAM ARNs) that see and act on every job.
    admin_arns: tuple[str, ...] = ()
    # The dashboard's Cognito user pool (the stack sets it; local mode's emulated one): a signed-in person's
    # groups are looked up there for team membership (members.cognito_groups, docs/TEAMS.md). "": no pool.
    dashboard_user_pool_id: str = ""
    compute: Literal["local", "sagemaker", "ec2"] = "local"
    # Endpoint of the (emulated) AWS APIs; None means the real ones.
    aws_endpoint_url: str | None = None
    idempotency_ttl_seconds: int = Field(default=3600, ge=60)
    trainer_image_uri: str | None = None
    # Where a job's own image (training_config.image) may come from: registries or registry/repository
    # prefixes (functions/catalog/images.py), comma-separated in TRAINPLANE_CUSTOM_IMAGE_REPOSITORIES
    # (CDK context `custom_image_repositories`). Empty: no custom images. docs/SECURITY.md.
    custom_image_repositories: tuple[str, ...] = ()
    # POST /train's `image` naming one of these repositories (any tag or digest) is DeepFinery's stock trainer,
    # whose contract /train translates and trainplane's own trainer serves: the job runs the deployment's
    # trainer image and records the named one as label train_image (docs/HABITS.md). Any other image is a
    # custom image (training_config.image). TRAINPLANE_TRAIN_STOCK_IMAGES, comma-separated; empty: none.
    train_stock_images: tuple[str, ...] = ("ghcr.io/deepfinery/trainer",)
    sagemaker_role_arn: str | None = None
    # Cloud compute (SageMaker and EC2 launchers). The stack sets these; local mode fills them with
    # emulated values. Subnets/security groups apply to both engines; empty means no VPC config.
    vpc_subnet_ids: tuple[str, ...] = ()
    vpc_security_group_ids: tuple[str, ...] = ()
    kms_key_id: str | None = None  # output, checkpoint and volume encryption
    default_max_runtime_seconds: int = Field(default=86_400, ge=60, le=28 * 24 * 3600)
    # Managed spot waits this long beyond the runtime limit for capacity before giving up (PREEMPTED).
    spot_extra_wait_seconds: int = Field(default=4 * 3600, ge=0, le=28 * 24 * 3600)
    sagemaker_keep_alive_seconds: int | None = Field(default=None, ge=0, le=21_600)  # warm pool (AWS: at most 6 h); None = off
    ec2_launch_template_id: str | None = None
    ec2_launch_template_name: str | None = None
    # $Default, not $Latest: each EC2 Fleet attempt adds a version of its own for a moment (its user data,
    # docs/PLACEMENT.md), which $Latest would hand to a launch running beside it. Roll a new AMI by making its
    # version the default.
    ec2_launch_template_version: str = "$Default"
    ec2_instance_profile_arn: str | None = None
    # The cluster placement group every multi-node EC2 job launches into (all its instances in one RunInstances
    # call); the CDK stack creates it. Without it, a multi-node job on compute 'ec2' cannot launch.
    ec2_placement_group: str | None = None
    ec2_root_device_name: str = "/dev/sda1"  # Deep Learning AMI (Ubuntu); only used to size the root volume
    trainer_log_group: str = "/trainplane/trainer"  # EC2 trainer containers log here (awslogs driver)
    # Lifecycle engine (functions/service/lifecycle.py, scheduler.py). Capacity: local mode has one pool
    # of GPUs (None: counted with nvidia-smi) and CPU slots for gpu_count = 0 jobs; the cloud has
    # per-queue quotas by GPU type, "queue:gpu_type=count,..." with * wildcards ("" = AWS's own quotas).
    local_cpu_slots: int = Field(default=1, ge=1, le=256)
    local_gpu_slots: int | None = Field(default=None, ge=0, le=1024)
    gpu_quotas: str = ""
    # Local mode's emulated GPU inventory, "H100=4,A100=8" (`trainplane up --gpus`): a job asking gpu_count n of
    # gpu_type H100 holds n of those while its trainer runs on the CPU. "" = the machine's own GPUs (local_gpu_slots).
    local_gpu_inventory: str = ""
    # Teams (issue 24, docs/TEAMS.md): what a principal in no team gets, "gpu_type=count,..." nominal per type
    # ("" = no limit of its own; "cpu=0" = nothing: admins may also PUT /teams/default), its fair-share weight,
    # and the half-life usage decays with.
    default_team_quotas: str = ""
    default_team_weight: float = Field(default=1.0, gt=0, le=1000)
    fair_share_half_life_seconds: float = Field(default=7 * 24 * 3600.0, ge=60)
    # Reclaim: a borrowed job runs at least this long before its lender may take the GPUs back.
    reclaim_min_run_seconds: int = Field(default=600, ge=0, le=7 * 24 * 3600)
    max_reclaims: int = Field(default=3, ge=0, le=100)  # then the job keeps its borrowed GPUs until it ends
    max_preemptions: int = Field(default=3, ge=0, le=100)  # automatic resumes after preemption, per job
    run_heartbeat_seconds: int = Field(default=900, ge=10, le=86_400)  # a run silent this long is checked
    stop_grace_seconds: int = Field(default=120, ge=1, le=3600)  # SIGTERM -> SIGKILL (SageMaker's is 120 s)
    reconcile_interval_seconds: int = Field(default=30, ge=1, le=3600)  # local mode's reconciler timer
    trainer_command: str | None = None  # local mode: the trainer's command line (default: python -m trainer)
    # The deployment's training shapes beside the defaults: a JSON list of TrainingShapeProfile
    # (schemas/shapes.py; functions/service/compat/shapes.py reads it). CDK context `training_shapes` sets it.
    training_shapes: str = ""
    # Set by the cloud stack (infra/). A dashboard origin the API answers CORS for (None: no CORS);
    # the gateway answers preflights, the API handler adds the header to its own responses.
    cors_origin: str | None = None
    # Retraining in AWS (infra/constructs/retraining.py): schedule-triggered policies get an EventBridge
    # Scheduler schedule in this group, run as this role, invoking this function (the dispatcher).
    retraining_schedule_group: str | None = None
    retraining_scheduler_role_arn: str | None = None
    retraining_function_arn: str | None = None
    # Sweeps: the controller woken by the API and the lifecycle: "local" in local mode (an in-process worker,
    # localmode/deploy/sweeps.py), a Lambda's name in AWS; None: no controller deployed, POST /sweeps is refused.
    sweep_controller_function: str | None = None
    # Path confinement (docs/SECURITY.md). Buckets/prefixes outside the artifacts bucket that jobs may
    # use: TRAINPLANE_BUCKET_GRANTS is a JSON list of {"uri", "access": "read"|"read-write", "principals"}
    # (the cloud stack writes it from the CDK context `bucket_grants`).
    bucket_grants: tuple[BucketGrant, ...] = ()
    # Local mode only (`trainplane up` sets both): the directories whose files jobs may name
    # (TRAINPLANE_LOCAL_ALLOWED_DIRS, os.pathsep-separated; `trainplane up --allow-dir DIR`), and the
    # state directory, which no job may ever name. In the cloud both are empty: no local file is allowed.
    local_allowed_dirs: tuple[str, ...] = ()
    local_state_dir: str | None = None

    @property
    def local_mode(self) -> bool:
        return self.local_state_dir is not None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, field in cls.model_fields.items():
            raw = env.get(PREFIX + name.upper())
            if raw is None:
                continue
            if name == "bucket_grants":
                values[name] = json.loads(raw) if raw.strip() else ()
            elif name == "local_allowed_dirs":
                values[name] = tuple(a for a in raw.split(os.pathsep) if a)
            elif field.annotation == tuple[float, ...]:
                values[name] = tuple(float(a) for a in raw.split(",") if a.strip())
            elif field.annotation == tuple[str, ...]:
                values[name] = tuple(a for a in raw.split(",") if a)
            else:
                values[name] = raw
        if "region" not in values and env.get("AWS_REGION"):
            values["region"] = env["AWS_REGION"]
        return cls.model_validate(values)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings.from_env()
