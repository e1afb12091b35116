"""The job record and S3 agree on the best checkpoint and on which checkpoints are kept.

The trainer deletes checkpoints (trainer/checkpoint.py apply_retention) and the lifecycle service records
which ones the job still has (functions/service/run_specs.py): both call schemas/checkpoint.py. Here the
trainer's own checkpoint events drive the service as they do in a run, in the two cases where the two
used to disagree: a best metric reported only as `eval_<metric>`, and a run resumed from an old checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from trainer import checkpoint as ckpt

from functions.service.run_specs import RunSpecs
from schemas.configs import CheckpointConfig, OutputConfig
from schemas.job import Job
from tests.fakes import InMemoryArtifactStore
from tests.lifecycle_support import make_job, make_request
from tests.trainer.test_checkpoint import _snapshot


class RecordedJob:
    """What the repository's add_checkpoint keeps of the service's decision (functions/adapters/dynamodb.py)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.specs = RunSpecs(InMemoryArtifactStore(), "bkt")

    def on_saved(self, manifest: ckpt.CheckpointManifest, uri: str) -> None:
        data: dict[str, Any] = {**manifest.model_dump(mode="json"), "uri": uri}  # trainer.loop.emit_checkpoint_event
        recorded = self.specs.checkpoint(self.job, data, datetime.now(UTC))
        assert recorded is not None
        ref, best, keep = recorded
        refs = [r for r in self.job.checkpoints if r.checkpoint_id != ref.checkpoint_id] + [ref]
        self.job = self.job.model_copy(
            update={"checkpoints": [r for r in refs if r.checkpoint_id in keep], "best_checkpoint_id": best or self.job.best_checkpoint_id}
        )


@pytest.mark.parametrize(
    ("config", "metrics_by_step", "resumed_from"),
    [
        # best by "loss" but the trainer reports eval_loss only: both fall back to eval_loss
        ({"save_total_limit": 2, "metric_for_best_model": "loss"}, [(1, 3.0), (2, 0.5), (3, 2.0), (4, 1.0), (5, 0.9)], None),
        # resumed from step 1 of this job: both keep it
        ({"save_total_limit": 1, "metric_for_best_model": "eval_loss"}, [(1, 3.0), (2, 0.5), (3, 2.0), (4, 1.0)], "step-000001"),
        # greater is better, named without the eval_ prefix, resumed and limited at once
        ({"save_total_limit": 1, "metric_for_best_model": "accuracy"}, [(1, 0.2), (2, 0.9), (3, 0.5), (4, 0.6)], "step-000001"),
    ],
)
def test_the_record_names_the_best_and_the_kept_checkpoints_that_s3_holds(
    tmp_path: Path, config: dict[str, Any], metrics_by_step: list[tuple[int, float]], resumed_from: str | None
) -> None:
    # Given a job whose checkpoint config the trainer runs with, and the trainer's events recorded by the service
    metric = str(config["metric_for_best_model"]).removeprefix("eval_")
    job = make_job(make_request()).model_copy(update={"output_config": OutputConfig(checkpoint=CheckpointConfig(**config))})
    record = RecordedJob(job)
    manager = ckpt.CheckpointManager(
        str(tmp_path / "ckpts"),
        tmp_path / "staging",
        job.output_config.checkpoint,
        job_id=job.job_id,
        attempt=1,
        training_type="SFT",
        on_saved=record.on_saved,
        asynchronous=False,
    )
    # When the trainer saves each checkpoint (resuming from the first one where the case says so)
    for step, value in metrics_by_step:
        manager.save(_snapshot(step, {f"eval_{metric}": value}))
        if resumed_from and step == 1:
            manager.resumed_from = resumed_from
        # Then after every save the record holds exactly what S3 holds, and names the trainer's best
        on_disk = [m for m, _ in manager.manifests()]
        assert sorted(r.checkpoint_id for r in record.job.checkpoints) == sorted(m.checkpoint_id for m in on_disk)
        best = manager.best(manager.manifests())
        assert best is not None and record.job.best_checkpoint_id == best[0].checkpoint_id
    if resumed_from:
        assert resumed_from in {r.checkpoint_id for r in record.job.checkpoints}
