"""Per account and stage configuration of the cloud stack, read once from CDK context.

Precedence, lowest first: the defaults below, the `trainplane.<stage>` block of cdk.json (or of
`-c trainplane=...`), then single `-c <field>=<value>` flags. `-c stage=prod` picks the block.
Command-line context values are strings, so lists are comma-separated and numbers are parsed here,
with an error that names the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from schemas.access import BucketGrant

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)

STAGE_BLOCK_KEY = "trainplane"

_ACCOUNT = re.compile(r"^\d{12}$")
_IAM_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:(iam::\d{12}:(user|role)/[\w+=,.@/-]+|sts::\d{12}:assumed-role/[\w+=,.@/-]+)$")
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^*]*)?$")


class ConfigError(ValueError):
    """The stage configuration is invalid; the message names the field."""


class ReservedConcurrency(BaseModel):
    """Reserved (and so also bounded) concurrent executions per function; 0 leaves a function unreserved.

    Reserved concurrency comes out of the account's regional pool, and AWS keeps 100 unreserved:
    a new account with the default quota of 10 must use 0 here until the quota is raised.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    api: int = Field(default=50, ge=0, le=1000)
    lifecycle: int = Field(default=20, ge=0, le=1000)
    events: int = Field(default=10, ge=0, le=1000)
    retraining: int = Field(default=5, ge=0, le=1000)
    sweeps: int = Field(default=5, ge=0, le=1000)
    event_publisher: int = Field(default=5, ge=0, le=1000)  # one invocation per stream shard at a time
    webhook_delivery: int = Field(default=5, ge=0, le=1000)


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: str = Field(default="dev", pattern=r"^[a-z][a-z0-9-]{0,15}$")
    account: str | None = None
    region: str | None = None
    # Principals (IAM user/role ARNs) that see and act on every job.
    admin_arns: tuple[str, ...] = ()
    # API resource policy: when either is set, only these accounts / this organization may call.
    # The deploying account is always allowed.
    api_allowed_account_ids: tuple[str, ...] = ()
    api_allowed_org_id: str | None = Field(default=None, pattern=r"^o-[a-z0-9]{10,32}$")
    # A dashboard origin (https://...) allowed by CORS. None: the stack's own dashboard distribution when
    # `dashboard` is on, else CORS off.
    cors_origin: str | None = None
    # The web dashboard (CloudFront + assets bucket + Cognito sign-in, infra/constructs/dashboard.py).
    dashboard: bool = True
    # The Cognito Hosted UI domain prefix (<prefix>.auth.<region>.amazoncognito.com), unique per region;
    # default trainplane-<stage>-<account>.
    dashboard_auth_domain_prefix: str | None = Field(default=None, pattern=r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
    api_throttle_rate: float = Field(default=50.0, gt=0, le=10_000)
    api_throttle_burst: int = Field(default=100, ge=1, le=5_000)
    # An existing WAFv2 web ACL to associate with the API stage.
    waf_web_acl_arn: str | None = None
    reserved_concurrency: ReservedConcurrency = ReservedConcurrency()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_retention_days: int = 30
    # Which engine runs jobs in this account.
    compute: Literal["sagemaker", "ec2"] = "sagemaker"
    # A prebuilt trainer image (ECR URI) instead of building trainer_image/ at deploy time.
    trainer_image_uri: str | None = None
    # Where a job's own container image (training_config.image) may come from: registries or
    # registry/repository prefixes (functions/catalog/images.py; docs/SECURITY.md). The trainer
    # roles may pull from the ECR ones; SageMaker runs ECR images only. Empty: no custom images.
    custom_image_repositories: tuple[str, ...] = ()
    # Build arguments of trainer_image/Dockerfile when the stack builds it: a CUDA PyTorch base image
    # (for instance the AWS Deep Learning Container) and the torch version it carries.
    trainer_base_image: str | None = None
    trainer_torch_version: str | None = Field(default=None, pattern=r"^\d+\.\d+\.\d+$")
    # S3 locations (s3://bucket/prefix) the trainer may READ training data from, besides the
    # artifacts bucket's datasets/ prefix: read grants for every principal (bucket_grants' shorthand).
    training_data_uris: tuple[str, ...] = ()
    # Buckets/prefixes outside the artifacts bucket that jobs may use (docs/SECURITY.md): a list of
    # {"uri": "s3://bucket[/prefix/]", "access": "read"|"read-write", "principals": ["*"|ARN, ...]}, in
    # cdk.json or as `-c bucket_grants='[...]'` (JSON). The API checks each job's paths against them per
    # principal; the trainer roles get IAM access to their union (IAM cannot tell principals apart there).
    bucket_grants: tuple[BucketGrant, ...] = ()
    # Optional VPC for SageMaker jobs and EC2 instances; empty = the account's default networking.
    vpc_id: str | None = Field(default=None, pattern=r"^vpc-[0-9a-f]{8,17}$")
    subnet_ids: tuple[str, ...] = ()
    # The Deep Learning AMI for EC2 jobs, as the public SSM parameter AWS keeps current.
    ec2_ami_ssm_parameter: str = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    ec2_root_volume_gb: int = Field(default=200, ge=30, le=16_384)
    # Artifacts bucket lifecycle: old versions of overwritten/deleted objects expire after this.
    noncurrent_version_expiration_days: int = Field(default=30, ge=1)
    # Alarm notifications go to this address when set (an SNS email subscription).
    alarm_email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    api_5xx_alarm_threshold: int = Field(default=5, ge=1)
    reconcile_every_minutes: int = Field(default=5, ge=1, le=60)
    # Per-queue GPU quotas by type for the scheduler: "queue:gpu_type=count,..." (Settings.gpu_quotas).
    gpu_quotas: str = ""
    # Teams (docs/TEAMS.md): what a principal in no team gets, "gpu_type=count,..." ("" = no limit of its own).
    default_team_quotas: str = ""
    # The deployment's training shapes beside the defaults (schemas/shapes.py TrainingShapeProfile
    # objects; `-c training_shapes='[...]'` takes the same list as JSON). Settings.training_shapes.
    training_shapes: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def is_dev(self) -> bool:
        return self.stage == "dev"

    def name(self, suffix: str) -> str:
        """A physical resource name for this stage, e.g. trainplane-prod-lifecycle."""
        return f"trainplane-{self.stage}-{suffix}"

    @field_validator("account")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        if value is not None and not _ACCOUNT.match(value):
            raise ValueError("must be a 12-digit AWS account id")
        return value

    @field_validator("api_allowed_account_ids")
    @classmethod
    def _accounts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in value if not _ACCOUNT.match(a)]
        if bad:
            raise ValueError(f"not 12-digit account ids: {', '.join(bad)}")
        return value

    @field_validator("admin_arns")
    @classmethod
    def _admins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in value if not _IAM_PRINCIPAL.match(a)]
        if bad:
            raise ValueError(f"not IAM user/role ARNs: {', '.join(bad)}")
        return value

    @field_validator("cors_origin")
    @classmethod
    def _origin(cls, value: str | None) -> str | None:
        # A wildcard origin would let any web page drive a signed session; name the dashboard instead.
        if value is not None and not re.match(r"^https://[a-z0-9.-]+(:\d+)?$", value) and not value.startswith("http://localhost"):
            raise ValueError("must be one origin such as https://dashboard.example.com (no path, no wildcard)")
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"CloudWatch Logs accepts only {', '.join(map(str, LOG_RETENTION_DAYS))}")
        return value

    @field_validator("training_data_uris")
    @classmethod
    def _data_uris(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [u for u in value if not _S3_URI.match(u)]
        if bad:
            raise ValueError(f"not s3://bucket[/prefix] URIs (no wildcards): {', '.join(bad)}")
        return value

    @field_validator("custom_image_repositories")
    @classmethod
    def _image_repositories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from functions.catalog.images import valid_entry

        bad = [e for e in value if not valid_entry(e)]
        if bad:
            raise ValueError(f"not a registry or registry/repository prefix: {', '.join(bad)}")
        return value

    @field_validator("bucket_grants", mode="before")
    @classmethod
    def _grants(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"bucket_grants: not a JSON list ({exc})") from exc
        return value

    def all_bucket_grants(self) -> tuple[BucketGrant, ...]:
        """bucket_grants plus training_data_uris as read grants for everyone: what Settings.bucket_grants gets."""
        return self.bucket_grants + tuple(BucketGrant(uri=u) for u in self.training_data_uris)

    @field_validator("subnet_ids")
    @classmethod
    def _subnets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not re.match(r"^subnet-[0-9a-f]{8,17}$", s)]
        if bad:
            raise ValueError(f"not subnet ids: {', '.join(bad)}")
        return value

    @field_validator("gpu_quotas")
    @classmethod
    def _quotas(cls, value: str) -> str:
        from functions.catalog.quotas import parse_quotas  # the scheduler's own parser: one grammar

        parse_quotas(value)
        return value

    @field_validator("default_team_quotas")
    @classmethod
    def _team_quotas(cls, value: str) -> str:
        from functions.catalog.quotas import parse_team_quotas  # the server's own parser: one grammar

        parse_team_quotas(value)
        return value

    @field_validator("training_shapes")
    @classmethod
    def _shapes(cls, value: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        from functions.catalog.shapes import catalog_from_json  # the control plane's own check: one grammar

        # compute is declared above: a shape's placement candidates must launch on it.
        catalog_from_json(json.dumps(value), compute=info.data.get("compute"))
        return value

    @model_validator(mode="after")
    def _vpc_needs_subnets(self) -> StageConfig:
        if bool(self.vpc_id) != bool(self.subnet_ids):
            raise ValueError("vpc_id and subnet_ids go together: give both or neither")
        return self

    @classmethod
    def from_context(cls, get: Any) -> StageConfig:
        """Build from a context getter (`app.node.try_get_context`)."""
        stage = get("stage") or "dev"
        blocks = _as_mapping(get(STAGE_BLOCK_KEY), STAGE_BLOCK_KEY)
        values: dict[str, Any] = dict(_as_mapping(blocks.get(stage), f"{STAGE_BLOCK_KEY}.{stage}"))
        values["stage"] = stage
        for name in cls.model_fields:
            if name == "stage":
                continue
            raw = get(name)
            if raw is not None:
                values[name] = raw
        return cls.parse(values)

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> StageConfig:
        coerced = {name: _coerce(cls, name, raw) for name, raw in values.items()}
        try:
            return cls.model_validate(coerced)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid stage configuration ({problems})") from exc


def _as_mapping(raw: Any, what: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"context {what}: not JSON ({exc})") from exc
    if not isinstance(raw, Mapping):
        raise ConfigError(f"context {what}: expected an object")
    return raw


def _coerce(cls: type[BaseModel], name: str, raw: Any) -> Any:
    """`-c admin_arns=a,b` arrives as one string; a JSON object for nested fields."""
    field = cls.model_fields.get(name)
    if field is None or not isinstance(raw, str):
        return raw
    annotation = str(field.annotation)
    if "BucketGrant" in annotation:
        return raw  # JSON: StageConfig._grants parses it
    if "tuple" in annotation:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if "ReservedConcurrency" in annotation:
        return _as_mapping(raw, name)
    if annotation.startswith("list"):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"context {name}: not JSON ({exc})") from exc
    return raw
