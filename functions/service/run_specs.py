"""What one attempt of a job runs with: the checkpoint it resumes from, its run spec, and the records
its reports become (checkpoint refs with best/retention, progress).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from functions import constants
from functions.adapters.ports import ArtifactStore
from functions.service.errors import InvalidRequest
from functions.service.paths import PathRules, valid_checkpoint_id
from schemas.checkpoint import step_of
from schemas.job import CheckpointRef, Job, Progress
from schemas.trainer import RunSpec

LATEST = "latest"  # training_config.resume_from_checkpoint: the newest checkpoint where the job keeps them


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
        return RunSpec(
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
            access=self.access(job, resume_from),
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
        metrics = {k: float(v) for k, v in (data.get("metrics") or {}).items() if isinstance(v, int | float)}
        # A checkpoint of this job lives under its own prefix: whatever URI the event reports (a custom
        # script can print any event) is not recorded, so a later resume or retry cannot be pointed elsewhere.
        uri = self.s3_uri(f"{constants.checkpoints_prefix(job.job_id)}{checkpoint_id}")
        ref = CheckpointRef(
            checkpoint_id=checkpoint_id, step=step, epoch=data.get("epoch"), metrics=metrics, uri=uri, attempt=job.attempt, created_at=now
        )
        refs = [r for r in job.checkpoints if r.checkpoint_id != checkpoint_id] + [ref]
        config = job.output_config.checkpoint
        best = best_of(refs, config.metric_for_best_model, config.greater_is_better)
        newest = sorted(refs, key=lambda r: r.step)
        keep = {r.checkpoint_id for r in (newest[-config.save_total_limit :] if config.save_total_limit else newest)}
        if best:
            keep.add(best)
        return ref, best, sorted(keep)


def progress_of(data: Mapping[str, Any], now: datetime) -> Progress:
    fields = {k: data[k] for k in ("step", "total_steps", "epoch", "loss", "eta_seconds", "tokens_per_second") if data.get(k) is not None}
    percent = data.get("percent")
    if percent is None and data.get("total_steps"):
        percent = 100.0 * float(data.get("step", 0)) / float(data["total_steps"])
    return Progress(percent=min(max(float(percent or 0.0), 0.0), 100.0), updated_at=now, **fields)


def best_of(refs: list[CheckpointRef], metric: str | None, greater: bool | None) -> str | None:
    """The best checkpoint by `metric` (greater is better unless it names a loss); ties go to the earlier."""
    if not metric:
        return None
    scored = [r for r in refs if metric in r.metrics]
    if not scored:
        return None
    higher = greater if greater is not None else not metric.endswith("loss")
    chosen = max(scored, key=lambda r: (r.metrics[metric], -r.step)) if higher else min(scored, key=lambda r: (r.metrics[metric], r.step))
    return chosen.checkpoint_id
