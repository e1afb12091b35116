"""A fast stand-in for the trainer that honours its contract (schemas/trainer.py), for lifecycle tests.

Run as `python -m tests.fake_trainer` with the LocalLauncher's environment. It reads the run spec,
resumes from `resume_from` (or the latest checkpoint under `checkpoint_uri`), "trains" `max_steps`
steps of `fake_step_seconds`, writes a checkpoint (files, then manifest.json last) every
`output_config.checkpoint.save_steps` steps, prints TRAINPLANE_EVENT lines, and exits with the
contract's codes, and keeps `metrics_uri` (metrics.jsonl: one point per step, uploaded at every
checkpoint and at the end, as the real trainer does). Events name the job and attempt and carry a
`seq`, as the real trainer's do. On SIGTERM it saves a checkpoint and exits 75. Knobs (strings): the hyperparameter
max_steps, and in training_config.environment (submit refuses hyperparameters the real trainer does
not know; `knobs_apart` moves them there) fake_step_seconds, fake_fail_at_step + fake_exit_code
(+ fake_failure "Reason: message"), fake_hang_at_step (stops reporting and sleeps: a stuck trainer),
fake_ignore_sigterm ("true").
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.checkpoint import MANIFEST_NAME, CheckpointManifest, ManifestFile, checkpoint_id_for
from schemas.trainer import (
    ENV_FAILURE_FILE,
    ENV_RUN_SPEC,
    ENV_S3_ENDPOINT,
    ExitCode,
    ReportSequence,
    RunSpec,
    TrainerEvent,
    TrainerEventKind,
)

_stop = False
_seq = ReportSequence()
_bound: dict[str, Any] = {}
_points: list[str] = []


def _on_term(signum: int, frame: Any) -> None:
    global _stop
    _stop = True


def emit(kind: TrainerEventKind, **data: Any) -> None:
    print(TrainerEvent(kind=kind, time=time.time(), data=data, seq=_seq.next(), **_bound).to_line(), flush=True)


def flush_metrics(spec: RunSpec) -> None:
    if spec.metrics_uri and _points:
        write_bytes(spec.metrics_uri, "".join(_points).encode())


def _s3() -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=os.environ.get(ENV_S3_ENDPOINT) or None, region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    )


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def read_text(uri: str) -> str:
    if uri.lstrip().startswith("{"):
        return uri
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        return _s3().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return Path(uri).read_text(encoding="utf-8")


def write_bytes(uri: str, data: bytes) -> None:
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        _s3().put_object(Bucket=bucket, Key=key, Body=data)
    else:
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        Path(uri).write_bytes(data)


def latest_step(checkpoint_uri: str) -> tuple[int, str] | None:
    """(step, uri) of the newest checkpoint that has a manifest."""
    found: list[tuple[int, str]] = []
    if checkpoint_uri.startswith("s3://"):
        bucket, prefix = _split(checkpoint_uri.rstrip("/") + "/")
        pages = _s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                if obj["Key"].endswith("/" + MANIFEST_NAME):
                    manifest = json.loads(_s3().get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                    found.append((int(manifest["step"]), f"s3://{bucket}/{obj['Key'].rsplit('/', 1)[0]}"))
    return max(found) if found else None


def save(spec: RunSpec, step: int, loss: float) -> None:
    emit(TrainerEventKind.PHASE, phase="CHECKPOINTING")
    checkpoint_id = checkpoint_id_for(step)
    uri = f"{spec.checkpoint_uri.rstrip('/')}/{checkpoint_id}"
    state = json.dumps({"step": step, "loss": loss}).encode()
    write_bytes(f"{uri}/trainer_state.json", state)
    manifest = CheckpointManifest(
        checkpoint_id=checkpoint_id,
        job_id=spec.job_id,
        attempt=spec.attempt,
        step=step,
        metrics={"loss": loss},
        files=[ManifestFile(path="trainer_state.json", size=len(state), sha256=hashlib.sha256(state).hexdigest())],
        created_at=datetime.now(UTC),
    )
    write_bytes(f"{uri}/{MANIFEST_NAME}", manifest.model_dump_json().encode())
    flush_metrics(spec)
    emit(TrainerEventKind.CHECKPOINT, **json.loads(manifest.model_dump_json()), uri=uri)
    emit(TrainerEventKind.PHASE, phase="TRAINING")


def knobs_apart(values: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(hyperparameters, environment): the fake trainer's knobs (fake_*) travel in the environment."""
    knobs = {k: v for k, v in values.items() if k.startswith(FAKE_PREFIX)}
    return {k: v for k, v in values.items() if k not in knobs}, knobs


FAKE_PREFIX = "fake_"


def main() -> int:
    signal.signal(signal.SIGTERM, _on_term)
    spec = RunSpec.model_validate_json(read_text(os.environ[ENV_RUN_SPEC]))
    _bound.update(job_id=spec.job_id, attempt=spec.attempt)
    if spec.metrics_uri:  # the earlier attempts' points stay ahead of this one's
        try:
            earlier = read_text(spec.metrics_uri).splitlines()
        except Exception:
            earlier = []
        _points.extend(f"{line}\n" for line in earlier if line.strip() and json.loads(line).get("attempt", 0) < spec.attempt)
    hp = {**spec.training_config.hyperparameters, **spec.training_config.environment}
    if hp.get("fake_ignore_sigterm") == "true":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a trainer that never honours a graceful stop
    max_steps = int(hp.get("max_steps", "5"))
    step_seconds = float(hp.get("fake_step_seconds", "0.05"))
    fail_at = int(hp.get("fake_fail_at_step", "-1"))
    hang_at = int(hp.get("fake_hang_at_step", "-1"))
    save_steps = spec.output_config.checkpoint.save_steps
    emit(TrainerEventKind.PHASE, phase="PREPARING")
    reported: dict[str, Any] = {}
    if spec.tracking is not None and spec.tracking.config.mlflow is not None:
        # The report the real trainer makes once its tracker run is open (it contacts the server; this stand-in does not).
        uri = spec.tracking.config.mlflow.tracking_uri.rstrip("/")
        run = spec.tracking.mlflow_run_id or f"fake{spec.job_id.replace('-', '')}"
        url = f"{uri}/#/experiments/0/runs/{run}" if uri.startswith("http") else None
        reported.update(mlflow_run_id=run, mlflow_experiment_id="0", mlflow_run_url=url, tensorboard_uri=spec.tracking.tensorboard_uri)
    if spec.tracking is not None and spec.tracking.config.wandb is not None:
        # The real trainer's W&B part of the same report (the run id is the job id; offline, files under wandb_uri).
        reported.update(wandb_run_id=spec.job_id, wandb_group=spec.job_id, wandb_offline_uri=spec.tracking.wandb_uri)
    if reported:
        emit(TrainerEventKind.TRACKING, **reported)
    start = 0
    resume = latest_step(spec.resume_from.rsplit("/", 1)[0]) if spec.resume_from else latest_step(spec.checkpoint_uri)
    if spec.resume_from:
        start = json.loads(read_text(spec.resume_from.rstrip("/") + "/trainer_state.json"))["step"]
    elif resume:
        start = resume[0]
    print(f"fake trainer: job {spec.job_id} attempt {spec.attempt} starting at step {start} of {max_steps}", flush=True)
    print(f"fake trainer: attempt {spec.attempt} says hello on stderr", file=sys.stderr, flush=True)
    emit(TrainerEventKind.PHASE, phase="TRAINING")
    loss = 1.0
    step = start
    while step < max_steps:
        if _stop:
            save(spec, step, loss)
            emit(TrainerEventKind.DONE, exit_code=int(ExitCode.STOPPED_WITH_CHECKPOINT), stopped=True)
            return ExitCode.STOPPED_WITH_CHECKPOINT
        if step == hang_at:
            time.sleep(3600)
        if step == fail_at:
            message = hp.get("fake_failure", f"UserError: fake failure at step {step}")
            Path(os.environ[ENV_FAILURE_FILE]).write_text(message, encoding="utf-8")
            emit(TrainerEventKind.FAILURE, reason=message.split(":")[0], message=message)
            return int(hp.get("fake_exit_code", "1"))
        time.sleep(step_seconds)
        step += 1
        loss = round(1.0 / (1 + step), 6)
        _points.append(json.dumps({"step": step, "loss": loss, "attempt": spec.attempt}) + "\n")
        emit(TrainerEventKind.PROGRESS, step=step, total_steps=max_steps, loss=loss, percent=100.0 * step / max_steps)
        if step % save_steps == 0 and step < max_steps:
            save(spec, step, loss)
    flush_metrics(spec)
    emit(TrainerEventKind.PHASE, phase="EXPORTING")
    write_bytes(f"{spec.output_uri or spec.checkpoint_uri}/model.json", json.dumps({"steps": step}).encode())
    emit(TrainerEventKind.DONE, exit_code=0, stopped=False)
    return ExitCode.COMPLETED


if __name__ == "__main__":
    sys.exit(main())
