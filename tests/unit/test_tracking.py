"""Experiment tracking in the control plane (docs/TRACKING.md): what submit refuses in output_config.tracking,
the run spec's tracking plan, the `tracking` report recorded on the job, and SageMaker's own MLflow setting."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from pydantic import ValidationError

from functions.adapters.launchers.sagemaker import SageMakerLauncher, build_training_job_request
from schemas.configs import OutputConfig
from schemas.job import StatusEvent, SubmitJobRequest
from schemas.status import JobStatus
from schemas.tracking import TrackingConfig
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.cloud_fixtures import cloud_settings, make_launch_request
from tests.helpers.jobs import request_body
from tests.lifecycle_support import make_job, make_request
from tests.unit.test_statemachine_tasks import EXEC, World

ARN = "arn:aws:sagemaker:eu-west-1:123456789012:mlflow-tracking-server/team-mlflow"


def errors_of(tracking: dict[str, Any]) -> list[tuple[str, str]]:
    body = request_body()
    body["output_config"] = {"tracking": tracking}
    with pytest.raises(ValidationError) as caught:
        SubmitJobRequest.model_validate(body)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]


@pytest.mark.parametrize(
    ("tracking", "field", "fragment"),
    [
        ({"mlflow": {"tracking_uri": "ftp://mlflow.example.com"}}, "mlflow.tracking_uri", "scheme 'ftp'"),
        ({"mlflow": {"tracking_uri": "sqlite:///tmp/mlflow.db"}}, "mlflow.tracking_uri", "scheme 'sqlite'"),
        ({"mlflow": {"tracking_uri": "databricks"}}, "mlflow.tracking_uri", "scheme '(none)'"),
        ({"mlflow": {"tracking_uri": "https://alice:s3cret@mlflow.example.com"}}, "mlflow.tracking_uri", "credentials"),
        ({"mlflow": {"tracking_uri": "https://mlflow.example.com/?token=x"}}, "mlflow.tracking_uri", "no query"),
        ({"mlflow": {"tracking_uri": "http://:5000"}}, "mlflow.tracking_uri", "no host"),
        ({"mlflow": {"tracking_uri": "http://mlflow:99999"}}, "mlflow.tracking_uri", "bad port"),
        ({"mlflow": {"tracking_uri": "file://relative/dir"}}, "mlflow.tracking_uri", "file:///absolute"),
        (
            {"mlflow": {"tracking_uri": "arn:aws:sagemaker:eu-west-1:123:mlflow-tracking-server/x"}},
            "mlflow.tracking_uri",
            "not a SageMaker MLflow ARN",
        ),
        ({"mlflow": {"tracking_uri": "arn:aws:s3:::bucket"}}, "mlflow.tracking_uri", "not a SageMaker MLflow ARN"),
        ({"mlflow": {"tracking_uri": "http://m:5000", "experiment_name": "a b"}}, "mlflow.experiment_name", "pattern"),
        ({"mlflow": {"tracking_uri": "http://m:5000", "token": "x"}}, "mlflow.token", "Extra inputs"),
        ({"wandb": {"project": "p"}}, "wandb.api_key_secret_arn", "online mode needs api_key_secret_arn"),
        ({"wandb": {"project": "p", "mode": "offline", "api_key": "k"}}, "wandb.api_key", "Extra inputs"),
        ({"wandb": {"project": "a/b", "mode": "offline"}}, "wandb.project", "pattern"),
        ({"wandb": {"project": "p", "mode": "sometimes"}}, "wandb.mode", "'online' or 'offline'"),
        ({"wandb": {"project": "p", "mode": "offline", "base_url": "https://u:k@wandb.example.com"}}, "wandb.base_url", "credentials"),
        ({"wandb": {"project": "p", "mode": "offline", "base_url": "ftp://wandb.example.com"}}, "wandb.base_url", "scheme 'ftp'"),
        ({"wandb": {"project": "p", "api_key_secret_arn": "arn:aws:s3:::bucket/key"}}, "wandb.api_key_secret_arn", "pattern"),
    ],
)
def test_a_tracker_the_trainer_could_not_use_is_refused_naming_the_field(tracking: dict[str, Any], field: str, fragment: str) -> None:
    ((where, message),) = errors_of(tracking)
    assert where == f"output_config.tracking.{field}" and fragment in message, message


def test_a_wandb_block_naming_its_key_by_secret_is_accepted() -> None:
    body = request_body()
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:trainplane/123456789012/user/alice/wandb-AbCdEf"
    body["output_config"] = {"tracking": {"wandb": {"project": "support-bot", "entity": "acme", "api_key_secret_arn": secret}}}
    wandb = SubmitJobRequest.model_validate(body).output_config.tracking.wandb  # type: ignore[union-attr]
    assert wandb is not None and wandb.mode == "online" and wandb.api_key_secret_arn == secret


def test_the_run_spec_plans_an_offline_wandb_run_under_the_jobs_prefix_and_continues_the_reported_one() -> None:
    world = World()
    job = _tracked_job(world, wandb={"project": "p", "mode": "offline"})
    world.to_training(job.job_id)
    first = world.svc.specs.run_spec(world.repo.get(job.job_id), 1, None)
    assert first.tracking is not None and first.tracking.wandb_uri == f"s3://bkt/jobs/{job.job_id}/wandb"
    assert first.tracking.wandb_run_id is None
    data = {"wandb_run_id": job.job_id, "wandb_group": job.job_id, "wandb_offline_uri": first.tracking.wandb_uri}
    report = TrainerEvent(kind=TrainerEventKind.TRACKING, time=0.0, data=data, job_id=job.job_id, attempt=1, seq=1)
    world.svc.on_trainer_event(job.job_id, 1, report)
    recorded = world.repo.get(job.job_id)
    assert recorded.tracking is not None and recorded.tracking.wandb_run_id == job.job_id
    assert world.svc.specs.run_spec(recorded, 2, None).tracking.wandb_run_id == job.job_id  # type: ignore[union-attr]


def test_tracking_is_refused_for_a_custom_script() -> None:
    body = request_body()
    body["training_config"]["framework"] = {"type": "CUSTOM", "custom_script_path": "s3://b/data/x/train.py"}
    body["output_config"] = {"tracking": {"tensorboard": {}}}
    with pytest.raises(ValidationError) as caught:
        SubmitJobRequest.model_validate(body)
    ((error),) = caught.value.errors()
    assert error["loc"] == ("output_config", "tracking") and "CUSTOM script logs its own runs" in error["msg"]


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.com/team/",
        ARN,
        "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-1",
        "file:///home/me/mlruns",
    ],
)
def test_the_tracking_uris_a_trainer_reaches_are_accepted(uri: str) -> None:
    body = request_body()
    body["output_config"] = {"tracking": {"mlflow": {"tracking_uri": uri}, "tensorboard": {}}}
    assert SubmitJobRequest.model_validate(body).output_config.tracking is not None


def _tracked_job(world: World, **tracking: Any) -> Any:
    request = make_request("tracked")
    job = make_job(request).model_copy(
        update={
            "labels": {"team": "nlp"},
            "output_config": OutputConfig(tracking=TrackingConfig.model_validate(tracking)),
        }
    )
    world.repo.create(job, StatusEvent(at=job.created_at, to_status=JobStatus.PENDING, reason="submitted"))
    world.repo.annotate(job.job_id, {"execution_arn": EXEC})
    return job


def test_the_run_spec_plans_one_run_per_job_and_the_reported_run_is_recorded_and_continued() -> None:
    world = World()
    job = _tracked_job(world, mlflow={"tracking_uri": "http://127.0.0.1:5000"}, tensorboard={})
    world.to_training(job.job_id)
    # Given the first attempt's run spec: the trackers, the job's name and labels, TensorBoard under its prefix
    first = world.svc.specs.run_spec(world.repo.get(job.job_id), 1, None)
    assert first.tracking is not None and first.tracking.mlflow_run_id is None
    assert first.tracking.labels == {"team": "nlp"} and first.tracking.job_name == "tracked"
    assert first.tracking.tensorboard_uri == f"s3://bkt/jobs/{job.job_id}/tensorboard"
    # When the trainer reports the run it opened (twice: delivery is at least once)
    data = {"mlflow_run_id": "r1", "mlflow_experiment_id": "7", "mlflow_run_url": "http://127.0.0.1:5000/#/experiments/7/runs/r1"}
    report = TrainerEvent(kind=TrainerEventKind.TRACKING, time=0.0, data=data, job_id=job.job_id, attempt=1, seq=1)
    world.svc.on_trainer_event(job.job_id, 1, report)
    world.svc.on_trainer_event(job.job_id, 1, report)
    # Then the job records it, and the next attempt's run spec continues that run
    recorded = world.repo.get(job.job_id)
    assert recorded.tracking is not None and recorded.tracking.mlflow_run_id == "r1"
    assert recorded.tracking.mlflow_run_url == data["mlflow_run_url"]
    assert world.svc.specs.run_spec(recorded, 2, None).tracking.mlflow_run_id == "r1"  # type: ignore[union-attr]
    # and an oversized report (a CUSTOM script prints what it likes) is ignored, not stored
    world.svc.on_trainer_event(job.job_id, 1, report.model_copy(update={"data": {"mlflow_run_id": "x" * 5000}, "seq": 2}))
    assert world.repo.get(job.job_id).tracking.mlflow_run_id == "r1"  # type: ignore[union-attr]
    # and a report of another attempt changes nothing
    world.svc.on_trainer_event(job.job_id, 1, report.model_copy(update={"data": {"mlflow_run_id": "other"}, "attempt": 2}))
    assert world.repo.get(job.job_id).tracking.mlflow_run_id == "r1"  # type: ignore[union-attr]


def test_a_job_without_trackers_has_no_plan() -> None:
    world = World()
    job = world.submit()
    assert world.svc.specs.run_spec(world.repo.get(job.job_id), 1, None).tracking is None


def test_a_sagemaker_mlflow_arn_goes_through_sagemakers_own_mlflow_setting() -> None:
    # Given a job tracked on a SageMaker managed MLflow server
    request = make_launch_request()
    tracking = TrackingConfig.model_validate({"mlflow": {"tracking_uri": ARN, "experiment_name": "team/llm"}})
    spec = request.run_spec.model_copy(update={"output_config": OutputConfig(tracking=tracking)})
    request = replace(request, run_spec=spec)
    # When its CreateTrainingJob request is built
    params = build_training_job_request(request, cloud_settings())
    # Then it carries MlflowConfig, and SageMaker's model of the API accepts the request
    assert params["MlflowConfig"] == {"MlflowResourceArn": ARN, "MlflowExperimentName": "team/llm", "MlflowRunName": request.job_id}
    client = boto3.client("sagemaker", region_name="us-east-1")
    with Stubber(client) as stubber:

        class Clients:
            def client(self, service: str) -> Any:
                return client

        stubber.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x"}, params)
        SageMakerLauncher(cloud_settings(), Clients()).launch(request)
    # and a tracking server URI is the trainer's business alone
    plain = TrackingConfig.model_validate({"mlflow": {"tracking_uri": "https://mlflow.example.com"}})
    other = request.run_spec.model_copy(update={"output_config": OutputConfig(tracking=plain)})
    assert "MlflowConfig" not in build_training_job_request(replace(request, run_spec=other), cloud_settings())
