"""Experiment tracking: where a job's trainer logs its run (docs/TRACKING.md).

`output_config.tracking` names the trackers; the control plane checks them at submit (a 422 naming the
field), the run spec carries them with what the trainer needs to keep ONE tracker run per job (the
job's labels, its parent for a retry), and the trainer reports the run it opened (a `tracking` report),
which the job records (`Job.tracking`) and `jobs get` and the dashboard show.

- MLflow: a tracking server (`http(s)://`), a SageMaker managed MLflow server or app ARN (the trainer
  uses the ARN as its tracking URI through the `sagemaker-mlflow` plugin, and a SageMaker launch also
  passes it in CreateTrainingJob's `MlflowConfig`), or a local file store (`file:///abs/dir`, confined
  like every local path: docs/SECURITY.md). Credentials are never part of a job: a URI holding a user
  or password is refused (they would be stored in clear); a server that needs auth gets it from the
  trainer's environment (the SageMaker plugin signs with the training role).
- TensorBoard: event files under the job's own prefix, `jobs/<id>/tensorboard/`.
- Weights & Biases: online (wandb.ai or a self-hosted server, `base_url`) with the API key read by the
  trainer from a Secrets Manager secret the job names (never the key itself: the job is stored as
  submitted), or offline (run files under the job's own prefix, `jobs/<id>/wandb/`, for `wandb sync`).
  Which secrets a principal may name: `schemas.access.secret_allowed` (docs/SECURITY.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from schemas.access import SECRET_ARN

# CreateTrainingJob's MlflowConfig.MlflowResourceArn (botocore's sagemaker model), with the resource types
# SageMaker documents: a tracking server, or a serverless MLflow app.
MLFLOW_ARN = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:[0-9]{12}:mlflow-(tracking-server|app)/[A-Za-z0-9](-*[A-Za-z0-9]){0,255}$")
# SageMaker's MlflowExperimentName / MlflowRunName pattern (AIMlflowConfig), so an ARN job's names pass.
MLFLOW_NAME = r"^[a-zA-Z0-9\-_./]{1,256}$"
FILE_SCHEME = "file://"
TENSORBOARD_DIR = "tensorboard"  # jobs/<id>/tensorboard/
WANDB_DIR = "wandb"  # jobs/<id>/wandb/: an offline W&B run's files, one directory per attempt
# W&B's entity and project names: letters, digits, '-', '_', '.' (no '/', which would change the run's path).
WANDB_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
WANDB_NEEDS_KEY = "online mode needs api_key_secret_arn: the Secrets Manager secret holding the W&B API key (docs/TRACKING.md)"


def is_mlflow_arn(uri: str) -> bool:
    return bool(MLFLOW_ARN.match(uri))


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class MlflowTracking(_Block):
    tracking_uri: str = Field(
        min_length=1,
        max_length=2048,
        description="http(s)://host[:port][/path] of an MLflow tracking server, a SageMaker managed MLflow ARN "
        "(arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>), or file:///abs/dir (local mode: a file store "
        "under a directory the owner may use). No credentials in the URI.",
    )
    experiment_name: str = Field(default="trainplane", pattern=MLFLOW_NAME, description="Created if missing.")

    @field_validator("tracking_uri")
    @classmethod
    def _a_tracking_uri(cls, value: str) -> str:
        if value.startswith("arn:"):
            if not is_mlflow_arn(value):
                raise ValueError(
                    f"{value!r} is not a SageMaker MLflow ARN (arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)"
                )
            return value
        if value.startswith(FILE_SCHEME):
            if not value[len(FILE_SCHEME) :].startswith("/"):
                raise ValueError("a file store is file:///absolute/dir")
            return value
        return _check_server_url(value, "tracking server", "a SageMaker MLflow ARN or file:///dir")


class TensorBoardTracking(_Block):
    enabled: bool = Field(default=True, description="Event files under the job's own prefix, jobs/<id>/tensorboard/.")


def _check_server_url(value: str, what: str, alternatives: str = "") -> str:
    """An http(s) server URL without credentials, query or fragment (they would be stored with the job)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"scheme {parts.scheme or '(none)'!r}: give an http(s):// {what}" + (f", {alternatives}" if alternatives else ""))
    if not parts.hostname:
        raise ValueError(f"the {what} URI names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URI would be stored with the job in clear: give the server without them")
    if parts.query or parts.fragment:
        raise ValueError(f"a {what} URI has no query or fragment")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from exc
    return value


class WandbTracking(_Block):
    project: str = Field(pattern=WANDB_NAME, description="The W&B project (created if missing).")
    entity: str | None = Field(default=None, pattern=WANDB_NAME, description="The W&B entity (team or user); default: the key's.")
    mode: Literal["online", "offline"] = Field(
        default="online",
        description="online: logs to the W&B server as it trains (the trainer needs a route to it). offline: the run's "
        "files go under the job's own prefix, jobs/<id>/wandb/, for `wandb sync` (docs/TRACKING.md).",
    )
    base_url: str | None = Field(
        default=None,
        max_length=2048,
        description="A self-hosted W&B server, http(s)://host[:port][/path], no credentials; default https://api.wandb.ai.",
    )
    api_key_secret_arn: str | None = Field(
        default=None,
        max_length=2048,
        pattern=SECRET_ARN,
        description="The Secrets Manager secret (its ARN) holding the W&B API key, read by the trainer with its role; "
        "required online. Its name must start with trainplane/<your principal key>/ (docs/SECURITY.md). Never the key itself.",
    )

    @field_validator("base_url")
    @classmethod
    def _a_server(cls, value: str | None) -> str | None:
        return None if value is None else _check_server_url(value, "W&B server")

    @model_validator(mode="after")
    def _online_has_a_key(self) -> WandbTracking:
        if self.mode == "online" and self.api_key_secret_arn is None:
            # Located at the field (schemas.configs.raise_at's way; configs imports this module), so the 422 names it.
            error = InitErrorDetails(type=PydanticCustomError("invalid_config", WANDB_NEEDS_KEY), loc=("api_key_secret_arn",), input=None)
            raise ValidationError.from_exception_data("WandbTracking", [error])
        return self


class TrackingConfig(_Block):
    mlflow: MlflowTracking | None = None
    tensorboard: TensorBoardTracking | None = None
    wandb: WandbTracking | None = Field(default=None, description="Weights & Biases, online or offline: see docs/TRACKING.md.")


class TrackingPlan(_Block):
    """What the run spec adds for the trainer: the trackers, and what makes one run per job."""

    config: TrackingConfig
    job_name: str
    labels: dict[str, str] = Field(default_factory=dict)
    parent_job_id: str | None = Field(default=None, description="A retry: its run is a child of the parent job's run.")
    mlflow_run_id: str | None = Field(default=None, description="The run an earlier attempt reported, continued.")
    tensorboard_uri: str | None = Field(default=None, description="Where the event files go (the job's own prefix).")
    wandb_run_id: str | None = Field(default=None, description="The W&B run an earlier attempt reported, continued.")
    wandb_uri: str | None = Field(default=None, description="Offline W&B: where each attempt's run directory goes (the job's own prefix).")


_Reported = Annotated[str, Field(max_length=2048)]  # a report is the trainer's word (a CUSTOM script's too): bounded


class TrackingRecord(BaseModel):
    """On the job: the tracker run the trainer reported (a `tracking` report)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    mlflow_run_id: _Reported | None = None
    mlflow_experiment_id: _Reported | None = None
    mlflow_run_url: _Reported | None = None
    mlflow_parent_run_id: _Reported | None = None
    tensorboard_uri: _Reported | None = None
    wandb_run_id: _Reported | None = None
    wandb_run_url: _Reported | None = None
    wandb_project: _Reported | None = None
    wandb_group: _Reported | None = None
    wandb_parent_run_id: _Reported | None = None
    wandb_offline_uri: _Reported | None = None
