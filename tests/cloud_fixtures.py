"""Builders shared by the cloud launcher tests: launch requests, settings, recorded events (tests/events)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from functions.service.ports import LaunchRequest
from functions.settings import Settings
from schemas.configs import DataConfig, DataSource, OutputConfig, ResourceConfig, TrainingConfig
from schemas.trainer import RunSpec
from tests.fake_trainer import knobs_apart

EVENTS_DIR = Path(__file__).parent / "events"
BUCKET = "trainplane-artifacts"
OWNER = "arn:aws:iam::123456789012:user/alice"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainplane-trainer:1.0"
ROLE = "arn:aws:iam::123456789012:role/trainplane-sagemaker"


def load_event(name: str) -> dict[str, Any]:
    """A recorded event or describe response: tests/events/<name>.json."""
    return json.loads((EVENTS_DIR / f"{name}.json").read_text(encoding="utf-8"))


def cloud_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "artifacts_bucket": BUCKET,
        "trainer_image_uri": IMAGE,
        "sagemaker_role_arn": ROLE,
        "ec2_launch_template_name": "trainplane-gpu",
        "ec2_instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/trainplane-trainer",
        "ec2_placement_group": "trainplane-multinode",
    }
    values.update(overrides)
    return Settings(**values)


def make_run_spec(
    job_id: str = "job-0a1b2c3d",
    attempt: int = 1,
    *,
    resources: ResourceConfig | None = None,
    sources: tuple[str, ...] = ("s3://team-data/support/train.jsonl",),
    environment: dict[str, str] | None = None,
    hyperparameters: dict[str, str] | None = None,
    max_runtime_seconds: int | None = None,
    image: str | None = None,
) -> RunSpec:
    hyperparameters, knobs = knobs_apart(hyperparameters if hyperparameters is not None else {"max_steps": "20", "learning_rate": "0.001"})
    training = TrainingConfig.model_validate(
        {
            "training_type": "LORA",
            "base_model": {"model_id": "tiny", "source": "config", "tokenizer_id": "byte", "model_kwargs": {"architecture": "llama"}},
            "hyperparameters": hyperparameters,
            "environment": {**knobs, **(environment or {})},
            **({"image": image} if image else {}),
        }
    )
    return RunSpec(
        job_id=job_id,
        attempt=attempt,
        training_config=training,
        data_config=DataConfig(sources=[DataSource(path=p, split="validation" if "valid" in p else "train") for p in sources]),
        output_config=OutputConfig(),
        resource_config=resources or ResourceConfig(gpu_count=1, gpu_type="A10G"),
        checkpoint_uri=f"s3://{BUCKET}/jobs/{job_id}/checkpoints",
        max_runtime_seconds=max_runtime_seconds,
    )


def make_launch_request(
    job_id: str = "job-0a1b2c3d",
    attempt: int = 1,
    *,
    preemptible: bool = False,
    labels: dict[str, str] | None = None,
    max_runtime_seconds: int | None = None,
    **spec: Any,
) -> LaunchRequest:
    run_spec = make_run_spec(job_id, attempt, max_runtime_seconds=max_runtime_seconds, **spec)
    return LaunchRequest(
        job_id=job_id,
        attempt=attempt,
        owner=OWNER,
        run_spec=run_spec,
        run_spec_uri=f"s3://{BUCKET}/jobs/{job_id}/config/run-{attempt:03d}.json",
        labels=labels if labels is not None else {"team": "support", "experiment": "lr sweep/3"},
        preemptible=preemptible,
        max_runtime_seconds=max_runtime_seconds,
    )
