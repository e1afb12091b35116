"""What one attempt of a job runs with: the checkpoint it resumes from, its run spec, and the records
its reports become (checkpoint refs with best/retention, progress).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from functions import constants
from functions.errors import InvalidRequest
from functions.service.paths import LATEST_CHECKPOINT, PathRules, valid_checkpoint_id
from functions.service.placement import apply_to_run_spec
from functions.service.ports import ArtifactStore
from schemas.checkpoint import CheckpointManifest, best_checkpoint, retained, step_of
from schemas.job import CheckpointRef, Job, Progress
from schemas.tracking import TENSORBOARD_DIR, WANDB_DIR, TrackingPlan
from schemas.trainer import RunSpec

LATEST = LATEST_CHECKPOINT  # training_config.resume_from_checkpoint: the newest checkpoint where the job keeps them


class RunSpecs:
    def __init__(self, artifacts: ArtifactStore, bucket: str, paths: PathRules | None = None) -> None:
        self.artifacts = artifacts
        self.bucket = bucket
        self.paths = paths

    def s3_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def resume_from(self, job: Job, attempt: int) -> str | None:
        """The URI to resume from: a named checkpoint (resume / retry), the latest (auto-resume), or none.

        ValueError naming the field when a named checkpoint does not exist.
        """
        own = {ref.checkpoint_id: ref for ref in job.checkpoints}
        if job.resume_checkpoint_id:
            return self._checkpoint_uri(job, own, job.resume_checkpoint_id, "resume checkpoint_id")
        if attempt > 1 and job.latest_checkpoint_id:
            return None  # the trainer resumes from the latest checkpoint under its own checkpoint_uri
        named = job.training_config.resume_from_checkpoint
        if named == LATEST:
            return None  # the trainer resumes from the newest checkpoint under its checkpoint_uri
        if named:
            if "://" in named or named.startswith("/"):
                return named  # a URI: a retry child starts from its parent's checkpoint
            return self._checkpoint_uri(job, own, named, "training_config.resume_from_checkpoint")
        return None

    def _checkpoint_uri(self, job: Job, own: Mapping[str, CheckpointRef], checkpoint_id: str, field: str) -> str:
        if checkpoint_id in own:
            return own[checkpoint_id].uri
        for manifest in self.artifacts.list_manifests(job.job_id):
            if manifest.checkpoint_id == checkpoint_id:
                return self.s3_uri(f"{constants.checkpoints_prefix(job.job_id)}{checkpoint_id}")
        raise ValueError(f"{field}: job {job.job_id} has no checkpoint {checkpoint_id!r}")

    def access(self, job: Job, resume_from: str | None) -> Any:
        """The AccessSet of this attempt: the job's paths checked again as its owner (ValueError naming the
        field when one is no longer allowed); None only without path rules (a bare RunSpecs in tests)."""
        if self.paths is None:
            return None
        extra = [("resume checkpoint", resume_from)] if resume_from else []
        try:
            return self.paths.access_for(job, extra)
        except InvalidRequest as exc:
            raise ValueError(str(exc)) from exc

    def run_spec(self, job: Job, attempt: int, resume_from: str | None) -> RunSpec:
        checkpoint_uri = self.s3_uri(constants.checkpoints_prefix(job.job_id).rstrip("/"))
        output_uri = job.output_config.output_path or self.s3_uri(f"{constants.job_prefix(job.job_id)}model")
        layout_uri: str | None = None
        resume_latest = True
        if job.output_config.layout == "deepfinery" and job.output_config.output_path:
            # seeds/004's run layout: the checkpoints live in the run's root, where the next run of the
            # same run_id finds them; a first attempt resumes from them only when asked to.
            layout_uri = job.output_config.output_path.rstrip("/")
            checkpoint_uri, output_uri = f"{layout_uri}/checkpoints", f"{layout_uri}/model"
            resume_latest = attempt > 1 or job.training_config.resume_from_checkpoint == LATEST
        spec = RunSpec(
            job_id=job.job_id,
            attempt=attempt,
            training_config=job.training_config,
            data_config=job.data_config,
            output_config=job.output_config,
            resource_config=job.resource_config,
            checkpoint_uri=checkpoint_uri,
            resume_from=resume_from,
            metrics_uri=self.s3_uri(constants.metrics_key(job.job_id)),
            output_uri=output_uri,
            max_runtime_seconds=job.scheduling_config.max_runtime_seconds,
            training_shape=job.training_shape,
            layout_uri=layout_uri,
            resume_latest=resume_latest,
            tracking=self.tracking_plan(job),
            access=self.access(job, resume_from),
        )
        return apply_to_run_spec(job, spec)  # the attempt's placement candidate, when the job has candidates

    def tracking_plan(self, job: Job) -> TrackingPlan | None:
        """output_config.tracking, plus what makes every attempt continue ONE tracker run (docs/TRACKING.md)."""
        config = job.output_config.tracking
        if config is None or (config.mlflow is None and config.tensorboard is None and config.wandb is None):
            return None
        tensorboard = config.tensorboard is not None and config.tensorboard.enabled
        wandb_offline = config.wandb is not None and config.wandb.mode == "offline"
        return TrackingPlan(
            config=config,
            job_name=job.name,
            labels=dict(job.labels),
            parent_job_id=job.parent_job_id,
            mlflow_run_id=job.tracking.mlflow_run_id if job.tracking else None,
            tensorboard_uri=self.s3_uri(f"{constants.job_prefix(job.job_id)}{TENSORBOARD_DIR}") if tensorboard else None,
            wandb_run_id=job.tracking.wandb_run_id if job.tracking else None,
            wandb_uri=self.s3_uri(f"{constants.job_prefix(job.job_id)}{WANDB_DIR}") if wandb_offline else None,
        )

    def checkpoint(self, job: Job, data: Mapping[str, Any], now: datetime) -> tuple[CheckpointRef, str | None, list[str]] | None:
        """A checkpoint event as (ref, best checkpoint id, ids to keep); None if it names no checkpoint."""
        checkpoint_id = str(data.get("checkpoint_id") or "")
        if not valid_checkpoint_id(checkpoint_id):
            return None
        try:
            step = int(data.get("step", step_of(checkpoint_id)))
        except ValueError:
            return None
        ref = self._ref(job, checkpoint_id, step, data, now)
        if ref is None:
            return None
        refs = [r for r in job.checkpoints if r.checkpoint_id != checkpoint_id] + [ref]
        config = job.output_config.checkpoint
        # The trainer's own computation (schemas/checkpoint.py), so the record names what S3 holds.
        best = best_checkpoint(refs, config.metric_for_best_model, config.greater_is_better)
        resumed_from = data.get("resumed_from")
        keep = retained(
            refs,
            save_total_limit=config.save_total_limit,
            metric=config.metric_for_best_model,
            greater_is_better=config.greater_is_better,
            resumed_from=str(resumed_from) if resumed_from else None,
        )
        if checkpoint_id not in keep:
            return None  # a late report of a checkpoint that retention has already dropped
        return ref, best.checkpoint_id if best is not None else None, sorted(keep)

    def _ref(self, job: Job, checkpoint_id: str, step: int, data: Mapping[str, Any], now: datetime) -> CheckpointRef | None:
        metrics = {k: float(v) for k, v in (data.get("metrics") or {}).items() if isinstance(v, int | float)}
        # A checkpoint of this job lives under its own prefix: whatever URI the event reports (a custom
        # script can print any event) is not recorded, so a later resume or retry cannot be pointed elsewhere.
        uri = self.s3_uri(f"{constants.checkpoints_prefix(job.job_id)}{checkpoint_id}")
        try:
            # The manifest's own attempt and time: the same checkpoint reported twice is the same ref.
            return CheckpointRef(
                checkpoint_id=checkpoint_id,
                step=step,
                epoch=data.get("epoch"),
                metrics=metrics,
                uri=uri,
                attempt=data.get("attempt") or job.attempt,
                created_at=data.get("created_at") or now,
                size_bytes=_size_of(data.get("files")),
            )
        except ValueError:
            return None

    def catch_up_checkpoints(
        self, job: Job, manifests: list[CheckpointManifest], now: datetime
    ) -> tuple[list[CheckpointRef], str | None] | None:
        """The job's checkpoints as S3 holds them (a checkpoint exists iff its manifest does) and the best
        of them; None when the record already says exactly that (or S3 holds none)."""
        if not manifests:
            return None
        known = {r.checkpoint_id: r for r in job.checkpoints}
        refs: list[CheckpointRef] = []
        for manifest in manifests:
            if not valid_checkpoint_id(manifest.checkpoint_id):
                continue
            existing = known.get(manifest.checkpoint_id)
            if existing is not None and existing.step == manifest.step:
                refs.append(existing)
                continue
            ref = self._ref(job, manifest.checkpoint_id, manifest.step, manifest.model_dump(mode="json"), now)
            if ref is not None:
                refs.append(ref)
        if not refs:
            return None
        config = job.output_config.checkpoint
        # The same best and retention as for reported checkpoints and the trainer's (schemas/checkpoint.py).
        chosen = best_checkpoint(refs, config.metric_for_best_model, config.greater_is_better)
        best = chosen.checkpoint_id if chosen is not None else None
        keep = retained(
            refs, save_total_limit=config.save_total_limit, metric=config.metric_for_best_model, greater_is_better=config.greater_is_better
        )
        refs = [r for r in sorted(refs, key=lambda r: r.step) if r.checkpoint_id in keep]
        latest = max(refs, key=lambda r: r.step).checkpoint_id
        if set(known) == {r.checkpoint_id for r in refs} and best == job.best_checkpoint_id and latest == job.latest_checkpoint_id:
            return None
        return refs, best

    def progress_from_metrics(self, job: Job, lines: Iterable[str], now: datetime, completed: bool) -> Progress | None:
        """The current attempt's progress as metrics.jsonl records it (its last point); None without one."""
        last: dict[str, Any] | None = None
        for line in lines:
            try:
                point = json.loads(line)
            except ValueError:
                continue
            if isinstance(point, dict) and isinstance(point.get("step"), int) and point.get("attempt") in (None, job.attempt):
                last = point
        if last is None:
            return None
        step = int(last["step"])
        same_attempt = job.progress.attempt in (None, job.attempt)
        total = job.progress.total_steps if same_attempt else None
        if completed:
            total, percent = total or step, 100.0
        elif total:
            percent = 100.0 * step / total
        else:
            percent = job.progress.percent if same_attempt else 0.0
        fields = {k: last[k] for k in ("epoch", "loss", "tokens_per_second") if isinstance(last.get(k), int | float)}
        return Progress(percent=min(max(percent, 0.0), 100.0), step=step, total_steps=total, updated_at=now, attempt=job.attempt, **fields)


def progress_of(data: Mapping[str, Any], now: datetime, attempt: int | None = None) -> Progress:
    fields = {k: data[k] for k in ("step", "total_steps", "epoch", "loss", "eta_seconds", "tokens_per_second") if data.get(k) is not None}
    percent = data.get("percent")
    if percent is None and data.get("total_steps"):
        percent = 100.0 * float(data.get("step", 0)) / float(data["total_steps"])
    return Progress(percent=min(max(float(percent or 0.0), 0.0), 100.0), updated_at=now, attempt=attempt, **fields)


def _size_of(files: Any) -> int | None:
    """The bytes a checkpoint's manifest lists (its `files`, each with a `size`); None when it lists none."""
    if not isinstance(files, list):
        return None
    sizes = [f.get("size") for f in files if isinstance(f, dict)]
    return sum(s for s in sizes if isinstance(s, int) and s >= 0) if sizes else None
