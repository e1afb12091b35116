"""A job whose checkpoints, metrics and export live in S3 (moto), as in local mode and on AWS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer import storage

from schemas.api import MetricsPoint
from schemas.checkpoint import CheckpointManifest
from schemas.trainer import ExitCode, TrainerEventKind
from tests.trainer.runs import make_spec, run_in_process


@pytest.fixture
def s3(s3_bucket):
    storage.reset_client()
    yield s3_bucket
    storage.reset_client()


def _keys(client, bucket: str, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))


@pytest.mark.slow
def test_checkpoints_metrics_and_export_in_s3_and_resume_on_a_fresh_host(s3, tmp_path: Path, monkeypatch, capsys) -> None:
    client, bucket = s3
    base = f"s3://{bucket}/jobs/job-1"
    # Given a job saving every epoch (24 records, batch 4: 6 steps an epoch) to S3, keeping 2
    spec = make_spec(
        tmp_path / "host-a",
        hyperparameters={"num_train_epochs": "3", "learning_rate": "3e-3", "logging_steps": "2"},
        output_config={"checkpoint": {"save_strategy": "epoch", "save_total_limit": 2}, "output_path": f"{base}/model"},
        checkpoint_uri=f"{base}/checkpoints",
        metrics_uri=f"{base}/metrics.jsonl",
    )

    # When it runs for two epochs and is stopped there (max_steps 12), then a new host runs it to the end
    first = run_in_process(
        tmp_path / "host-a",
        {
            **spec,
            "training_config": {
                **spec["training_config"],
                "hyperparameters": {**spec["training_config"]["hyperparameters"], "max_steps": "12"},
            },
        },
        monkeypatch,
        capsys,
    )
    assert first.code == ExitCode.COMPLETED, first.stdout[-2000:]
    assert _keys(client, bucket, "jobs/job-1/checkpoints/step-000006/")[-1].endswith("trainer_state.json")
    second = run_in_process(tmp_path / "host-b", {**spec, "attempt": 2}, monkeypatch, capsys)
    assert second.code == ExitCode.COMPLETED, second.stdout[-2000:]

    # Then the checkpoints are per epoch, two kept, the second host resumed from step 12 in S3
    steps = sorted({key.split("/")[3] for key in _keys(client, bucket, "jobs/job-1/checkpoints/")})
    assert steps == ["step-000012", "step-000018"]
    manifest = CheckpointManifest.model_validate_json(
        client.get_object(Bucket=bucket, Key="jobs/job-1/checkpoints/step-000018/manifest.json")["Body"].read()
    )
    assert manifest.resumed_from == "step-000012" and manifest.attempt == 2 and manifest.epoch == pytest.approx(3.0)
    saved = [e.data["checkpoint_id"] for e in second.of_kind(TrainerEventKind.CHECKPOINT)]
    assert saved == ["step-000018"]
    # and metrics.jsonl in S3 holds both attempts, every second step
    lines = client.get_object(Bucket=bucket, Key="jobs/job-1/metrics.jsonl")["Body"].read().decode().splitlines()
    points = [MetricsPoint.model_validate_json(line) for line in lines]
    assert [(p.attempt, p.step) for p in points if p.loss is not None] == [(1, s) for s in (2, 4, 6, 8, 10, 12)] + [
        (2, s) for s in (14, 16, 18)
    ]
    # and the exported model is in S3 too
    exported = _keys(client, bucket, "jobs/job-1/model/")
    assert "jobs/job-1/model/model.safetensors" in exported and "jobs/job-1/model/tokenizer.json" in exported
    info = json.loads(client.get_object(Bucket=bucket, Key="jobs/job-1/model/trainplane_export.json")["Body"].read())
    assert info["step"] == 18 and info["attempt"] == 2
