"""SageMakerLauncher: one attempt of a job = one SageMaker training job, through boto3 only.

The request is built by a pure function (`build_training_job_request`) so that tests check it
without AWS; `launch`, `stop` and `describe` are the three calls the lifecycle engine makes.
`describe_training_job` maps a DescribeTrainingJob response, or the detail of a "SageMaker Training
Job State Change" EventBridge event (the same shape), to a RunDescription: the events handler and
the reconciler share it, so a missed event and a received one reach the same verdict.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from functions import constants
from functions.adapters.launchers.cloud import (
    ClientSource,
    LaunchCapacityError,
    check_request,
    launch_environment,
    launch_tags,
    run_image,
)
from functions.catalog.instances import InstanceChoice, select_instance
from functions.catalog.job_names import training_job_name
from functions.errors import Unsupported
from functions.service.ports import LaunchHandle, LaunchRequest, RunDescription, RunState
from functions.settings import Settings
from schemas.job import ErrorType
from schemas.tracking import is_mlflow_arn
from schemas.trainer import DEFAULT_STOP_GRACE_SECONDS, EXIT_CODE_ERRORS, FAILURE_REASON_ERRORS, METRIC_DEFINITIONS, FailureReason

logger = logging.getLogger(__name__)

NAME = "sagemaker"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
RUN_SPEC_HYPERPARAMETER = "run_spec"  # trainer/contract.py reads the run spec URI from this key
LOG_GROUP = constants.SAGEMAKER_TRAINING_LOG_GROUP  # SageMaker's own; streams are <training-job-name>/algo-<n>-<epoch>
MAX_SECONDS = 28 * 24 * 3600  # SageMaker's ceiling for MaxRuntimeInSeconds and MaxWaitTimeInSeconds
_MAX_HYPERPARAMETERS = 100  # SageMaker's limits on HyperParameters
_MAX_HYPERPARAMETER_VALUE = 2500

# SecondaryStatus while the job is InProgress -> our run state. "Interrupted" while InProgress means
# managed spot lost the instances and SageMaker itself waits for capacity to restart from the synced
# checkpoints: the attempt is alive, not preempted, until SageMaker gives up (MaxWaitTimeExceeded).
_IN_PROGRESS: dict[str, RunState] = {
    "Starting": RunState.STARTING,
    "Pending": RunState.STARTING,
    "LaunchingMLInstances": RunState.STARTING,
    "PreparingTrainingStack": RunState.STARTING,
    "Downloading": RunState.STARTING,
    "DownloadingTrainingImage": RunState.STARTING,
    "Restarting": RunState.STARTING,
    "Interrupted": RunState.STARTING,
    "Training": RunState.RUNNING,
    "Uploading": RunState.RUNNING,
    "Updating": RunState.RUNNING,
    "Stopping": RunState.STOPPING,
}
_PREEMPTED_SECONDARY = {"Interrupted", "MaxWaitTimeExceeded"}
# FailureReason prefixes SageMaker uses for "could not get the instances" (capacity, quota).
_CAPACITY_MARKERS = ("CapacityError", "InsufficientCapacity", "InsufficientInstanceCapacity", "ResourceLimitExceeded")
_TRAINER_REASONS: dict[str, tuple[RunState, ErrorType]] = {
    **{word: (RunState.FAILED, error) for word, error in FAILURE_REASON_ERRORS.items()},
    FailureReason.PREEMPTED.value: (RunState.PREEMPTED, ErrorType.PREEMPTED),
}
_EXIT_CODE_RE = re.compile(r"exit code:?\s*(\d+)", re.IGNORECASE)


def build_training_job_request(request: LaunchRequest, settings: Settings, choice: InstanceChoice | None = None) -> dict[str, Any]:
    """The CreateTrainingJob parameters for one attempt (pure: no AWS call)."""
    if not settings.trainer_image_uri or not settings.sagemaker_role_arn:
        raise Unsupported("compute 'sagemaker' needs the trainer_image_uri and sagemaker_role_arn settings")
    spec = request.run_spec
    check_request(request, NAME)
    choice = choice or select_instance(spec.resource_config, "sagemaker", spec.training_shape)
    bucket = settings.artifacts_bucket
    name = training_job_name(request.job_id, request.attempt)
    runtime = min(request.max_runtime_seconds or spec.max_runtime_seconds or settings.default_max_runtime_seconds, MAX_SECONDS)

    resource_config: dict[str, Any] = {
        "InstanceType": choice.instance_type,
        "InstanceCount": choice.instance_count,
        "VolumeSizeInGB": choice.volume_size_gb,
    }
    # SageMaker refuses VolumeKmsKeyId on types with local NVMe storage (encrypted by the hardware).
    if settings.kms_key_id and not choice.spec.local_storage:
        resource_config["VolumeKmsKeyId"] = settings.kms_key_id
    # Warm pools do not combine with managed spot: keep-alive only for on-demand runs.
    if settings.sagemaker_keep_alive_seconds and not request.preemptible:
        resource_config["KeepAlivePeriodInSeconds"] = settings.sagemaker_keep_alive_seconds
    if len(request.instance_preferences) > 1 and not request.preemptible:
        # Placement's same-shape on-demand candidates (docs/PLACEMENT.md): SageMaker takes the first type with
        # capacity. InstancePreferences excludes InstanceType; a warm pool is kept for one type only.
        del resource_config["InstanceType"], resource_config["InstanceCount"]
        resource_config.pop("KeepAlivePeriodInSeconds", None)
        resource_config["InstancePreferences"] = [
            {"InstanceType": t, "InstanceCount": choice.instance_count} for t in request.instance_preferences
        ]

    stopping: dict[str, int] = {"MaxRuntimeInSeconds": runtime}
    if request.preemptible:
        # MaxWait counts waiting for spot capacity plus the run itself, so it must be >= MaxRuntime.
        stopping["MaxWaitTimeInSeconds"] = min(runtime + settings.spot_extra_wait_seconds, MAX_SECONDS)

    output: dict[str, str] = {"S3OutputPath": f"s3://{bucket}/{constants.job_prefix(request.job_id)}output/"}
    if settings.kms_key_id:
        output["KmsKeyId"] = settings.kms_key_id

    environment = launch_environment(request)
    environment.setdefault("TRAINPLANE_STOP_GRACE_SECONDS", str(DEFAULT_STOP_GRACE_SECONDS))
    params: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": settings.sagemaker_role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": run_image(request, settings, NAME),
            "TrainingInputMode": "File",
            "MetricDefinitions": [dict(d) for d in METRIC_DEFINITIONS],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "HyperParameters": _hyperparameters(request),
        "InputDataConfig": input_channels(request),
        "OutputDataConfig": output,
        "ResourceConfig": resource_config,
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": request.preemptible,
        "CheckpointConfig": {"S3Uri": checkpoint_s3_uri(bucket, request.job_id), "LocalPath": CHECKPOINT_LOCAL_PATH},
        "Environment": environment,
        "Tags": [{"Key": k, "Value": v} for k, v in launch_tags(request).items()],
    }
    mlflow = spec.output_config.tracking.mlflow if spec.output_config.tracking else None
    if mlflow is not None and is_mlflow_arn(mlflow.tracking_uri):
        # SageMaker's own MLflow setting for a managed MLflow server; the trainer logs to the same ARN
        # (the sagemaker-mlflow plugin signs with this role) and names the run after the job.
        params["MlflowConfig"] = {
            "MlflowResourceArn": mlflow.tracking_uri,
            "MlflowExperimentName": mlflow.experiment_name,
            "MlflowRunName": request.job_id,
        }
    if not params["InputDataConfig"]:
        del params["InputDataConfig"]
    if settings.vpc_subnet_ids or settings.vpc_security_group_ids:
        if not (settings.vpc_subnet_ids and settings.vpc_security_group_ids):
            raise Unsupported("settings: vpc_subnet_ids and vpc_security_group_ids must be set together")
        params["VpcConfig"] = {"Subnets": list(settings.vpc_subnet_ids), "SecurityGroupIds": list(settings.vpc_security_group_ids)}
    if choice.instance_count > 1:
        params["EnableInterContainerTrafficEncryption"] = settings.kms_key_id is not None
    return params


def checkpoint_s3_uri(bucket: str, job_id: str) -> str:
    """SageMaker syncs CheckpointConfig.LocalPath with this prefix: the job's one checkpoint layout."""
    return f"s3://{bucket}/{constants.checkpoints_prefix(job_id).rstrip('/')}"


def channel_name(index: int) -> str:
    """data_config.sources[i] -> channel `source_<i>` (SM_CHANNEL_SOURCE_<i>, /opt/ml/input/data/source_<i>)."""
    return f"source_{index}"


def input_channels(request: LaunchRequest) -> list[dict[str, Any]]:
    # FastFile streams objects on first read: a trainer that reads s3:// itself pays nothing for the
    # channel, one that reads the channel directory skips its own download.
    return [
        {
            "ChannelName": channel_name(i),
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source.path, "S3DataDistributionType": "FullyReplicated"}},
            "InputMode": "FastFile",
        }
        for i, source in enumerate(request.run_spec.data_config.sources)
    ]


def _hyperparameters(request: LaunchRequest) -> dict[str, str]:
    # The run spec URI is the one source of truth; the job's own hyperparameters are repeated only so
    # that the console shows them (the trainer merges them over the spec's: same values).
    hps = {RUN_SPEC_HYPERPARAMETER: request.run_spec_uri}
    own = request.run_spec.training_config.hyperparameters
    if len(own) < _MAX_HYPERPARAMETERS and all(len(v) <= _MAX_HYPERPARAMETER_VALUE for v in own.values()):
        hps.update({k: v for k, v in own.items() if k != RUN_SPEC_HYPERPARAMETER})
    return hps


def describe_training_job(job: Mapping[str, Any]) -> RunDescription:
    """DescribeTrainingJob response or state-change event detail -> where the attempt stands."""
    status = str(job.get("TrainingJobStatus", ""))
    secondary = job.get("SecondaryStatus")
    failure = job.get("FailureReason") or None
    resources = job.get("ResourceConfig") or {}
    common: dict[str, Any] = {
        "secondary_status": secondary,
        "billable_seconds": _seconds(job.get("BillableTimeInSeconds")),
        "run_seconds": _seconds(job.get("TrainingTimeInSeconds")) or _elapsed(job.get("TrainingStartTime"), job.get("TrainingEndTime")),
        # With InstancePreferences, the type SageMaker selected (once it has).
        "instance_type": resources.get("SelectedInstanceType") or resources.get("InstanceType"),
        "instance_count": int(resources.get("SelectedInstanceCount") or resources.get("InstanceCount") or 1),
        "spot": bool(job.get("EnableManagedSpotTraining")),
    }
    if status == "InProgress":
        return RunDescription(state=_IN_PROGRESS.get(str(secondary), RunState.STARTING), **common)
    if status == "Stopping":
        return RunDescription(state=RunState.STOPPING, **common)
    if status == "Completed":
        return RunDescription(state=RunState.COMPLETED, **common)
    if status == "Stopped":
        if secondary in _PREEMPTED_SECONDARY:
            return RunDescription(RunState.PREEMPTED, ErrorType.PREEMPTED, failure or f"spot capacity lost ({secondary})", **common)
        if secondary == "MaxRuntimeExceeded":
            return RunDescription(RunState.FAILED, ErrorType.TIMEOUT, failure or "the run passed max_runtime_seconds", **common)
        return RunDescription(RunState.STOPPED, None, failure, **common)
    if status == "Failed":
        state, error_type = classify_failure(failure, secondary)
        return RunDescription(state, error_type, failure or "the training job failed", **common)
    return RunDescription(state=RunState.UNKNOWN, message=f"unexpected TrainingJobStatus {status!r}", **common)


def classify_failure(failure: str | None, secondary: str | None = None) -> tuple[RunState, ErrorType]:
    """SageMaker's FailureReason -> (FAILED | PREEMPTED, ErrorType).

    Algorithm errors carry the trainer's /opt/ml/output/failure text ("OutOfMemory: ..."), possibly
    after SageMaker's "AlgorithmError: " prefix; capacity problems are preemptions (retry elsewhere).
    """
    text = (failure or "").strip()
    if secondary in _PREEMPTED_SECONDARY or any(marker.lower() in text.lower() for marker in _CAPACITY_MARKERS):
        return RunState.PREEMPTED, (ErrorType.PREEMPTED if secondary in _PREEMPTED_SECONDARY else ErrorType.CAPACITY)
    if secondary == "MaxRuntimeExceeded":
        return RunState.FAILED, ErrorType.TIMEOUT
    body = text.removeprefix("AlgorithmError:").strip()
    word = body.split(":", 1)[0].strip()
    if word in _TRAINER_REASONS:
        return _TRAINER_REASONS[word]
    code = _EXIT_CODE_RE.search(text)
    if code and int(code.group(1)) in EXIT_CODE_ERRORS:
        return RunState.FAILED, EXIT_CODE_ERRORS[int(code.group(1))]
    if text.startswith("AlgorithmError"):
        return RunState.FAILED, ErrorType.USER_ERROR  # the user's code raised without classifying itself
    if text.startswith("ClientError"):
        # Configuration SageMaker refused at run time: missing data, bad image, bad permissions.
        lowered = text.lower()
        data = "data" in lowered or "s3" in lowered or "channel" in lowered
        return RunState.FAILED, (ErrorType.DATA_ERROR if data else ErrorType.USER_ERROR)
    return RunState.FAILED, ErrorType.INTERNAL


class SageMakerLauncher:
    """The Launcher port over CreateTrainingJob / StopTrainingJob / DescribeTrainingJob."""

    name = NAME

    def __init__(self, settings: Settings, clients: ClientSource) -> None:
        self._settings = settings
        self._clients = clients

    @property
    def _sm(self) -> Any:
        return self._clients.client("sagemaker")

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        choice = select_instance(request.run_spec.resource_config, "sagemaker", request.run_spec.training_shape)
        params = build_training_job_request(request, self._settings, choice)
        from botocore.exceptions import ClientError

        name = params["TrainingJobName"]
        try:
            arn = self._sm.create_training_job(**params)["TrainingJobArn"]
        except ClientError as exc:
            code, message = _error(exc)
            if code == "ResourceInUse" or "already exists" in message or "must be unique" in message:
                # A retried Launch task: the job of this attempt exists already, it is the same run.
                arn = self._sm.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
            elif code == "ResourceLimitExceeded":
                raise LaunchCapacityError(choice.instance_type, f"SageMaker quota for {choice.instance_type}: {message}") from exc
            else:
                raise
        logger.info("created training job", extra={"job_id": request.job_id, "training_job": name, "instance_type": choice.instance_type})
        return LaunchHandle(
            launcher=NAME,
            run_id=name,
            attempt=request.attempt,
            extra={
                "arn": arn,
                "instance_type": choice.instance_type,
                "instance_count": str(choice.instance_count),
                "spot": str(request.preemptible).lower(),
                "launched_at": f"{datetime.now(UTC).timestamp():.3f}",
            },
        )

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        # StopTrainingJob is the graceful stop: SIGTERM, 120 s grace, then SIGKILL. SageMaker has no
        # harder stop, so a cancel (graceful=False) makes the same call.
        from botocore.exceptions import ClientError

        try:
            self._sm.stop_training_job(TrainingJobName=handle.run_id)
        except ClientError as exc:
            code, message = _error(exc)
            # Already ended or stopping, or never created: the stop has nothing left to do.
            if code in {"ValidationException", "ResourceNotFound"}:
                logger.info("stop: nothing to stop", extra={"training_job": handle.run_id, "reason": message})
                return
            raise

    def describe(self, handle: LaunchHandle) -> RunDescription:
        from botocore.exceptions import ClientError

        try:
            job = self._sm.describe_training_job(TrainingJobName=handle.run_id)
        except ClientError as exc:
            code, message = _error(exc)
            if code in {"ValidationException", "ResourceNotFound"} and ("not find" in message or "not found" in message.lower()):
                return RunDescription(state=RunState.UNKNOWN, message=f"training job {handle.run_id} not found")
            raise
        return describe_training_job(job)

    def tags_of(self, arn: str) -> dict[str, str]:
        tags = self._sm.list_tags(ResourceArn=arn).get("Tags", [])
        return {t["Key"]: t["Value"] for t in tags}


def _error(exc: Any) -> tuple[str, str]:
    err = exc.response.get("Error", {})
    return str(err.get("Code", "")), str(err.get("Message", ""))


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _elapsed(start: Any, end: Any) -> float | None:
    start_s, end_s = _epoch(start), _epoch(end)
    return max(0.0, end_s - start_s) if start_s is not None and end_s is not None else None


def _epoch(value: Any) -> float | None:
    """boto3 gives datetimes; EventBridge event details give epoch milliseconds."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return value / 1000.0
    if isinstance(value, str):  # recorded responses keep ISO strings
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
