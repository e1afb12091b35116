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
- Weights & Biases: refused at submit (no trainer here reaches wandb.ai, and no wandb client is in
  the image); see docs/TRACKING.md.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

# CreateTrainingJob's MlflowConfig.MlflowResourceArn (botocore's sagemaker model), with the resource types
# SageMaker documents: a tracking server, or a serverless MLflow app.
MLFLOW_ARN = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:[0-9]{12}:mlflow-(tracking-server|app)/[A-Za-z0-9](-*[A-Za-z0-9]){0,255}$")
# SageMaker's MlflowExperimentName / MlflowRunName pattern (AIMlflowConfig), so an ARN job's names pass.
MLFLOW_NAME = r"^[a-zA-Z0-9\-_./]{1,256}$"
FILE_SCHEME = "file://"
TENSORBOARD_DIR = "tensorboard"  # jobs/<id>/tensorboard/
WANDB_REFUSED = (
    "Weights & Biases is not reachable from trainplane's trainers: the trainer image carries no wandb client and "
    "trainplane stores no API keys; log to MLflow or TensorBoard (docs/TRACKING.md)"
)


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
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https"):
            raise ValueError(
                f"scheme {parts.scheme or '(none)'!r}: give an http(s):// tracking server, a SageMaker MLflow ARN or file:///dir"
            )
        if not parts.hostname:
            raise ValueError("the tracking server URI names no host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("credentials in the URI would be stored with the job in clear: give the server without them")
        if parts.query or parts.fragment:
            raise ValueError("a tracking server URI has no query or fragment")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"bad port: {exc}") from exc
        return value


class TensorBoardTracking(_Block):
    enabled: bool = Field(default=True, description="Event files under the job's own prefix, jobs/<id>/tensorboard/.")


class WandbTracking(_Block):
    project: str = Field(min_length=1, max_length=128)
    entity: str | None = Field(default=None, max_length=128)


class TrackingConfig(_Block):
    mlflow: MlflowTracking | None = None
    tensorboard: TensorBoardTracking | None = None
    wandb: WandbTracking | None = Field(default=None, description="Refused (422): see docs/TRACKING.md.")

    @field_validator("wandb")
    @classmethod
    def _wandb_unreachable(cls, value: WandbTracking | None) -> WandbTracking | None:
        if value is not None:
            raise ValueError(WANDB_REFUSED)
        return value


class TrackingPlan(_Block):
    """What the run spec adds for the trainer: the trackers, and what makes one run per job."""

    config: TrackingConfig
    job_name: str
    labels: dict[str, str] = Field(default_factory=dict)
    parent_job_id: str | None = Field(default=None, description="A retry: its run is a child of the parent job's run.")
    mlflow_run_id: str | None = Field(default=None, description="The run an earlier attempt reported, continued.")
    tensorboard_uri: str | None = Field(default=None, description="Where the event files go (the job's own prefix).")


_Reported = Annotated[str, Field(max_length=2048)]  # a report is the trainer's word (a CUSTOM script's too): bounded


class TrackingRecord(BaseModel):
    """On the job: the tracker run the trainer reported (a `tracking` report)."""

    model_config = ConfigDict(extra="ignore")
    mlflow_run_id: _Reported | None = None
    mlflow_experiment_id: _Reported | None = None
    mlflow_run_url: _Reported | None = None
    mlflow_parent_run_id: _Reported | None = None
    tensorboard_uri: _Reported | None = None
