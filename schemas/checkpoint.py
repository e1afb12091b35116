"""The checkpoint manifest: written last, so a checkpoint without one does not exist.

Layout (docs/DESIGN.md): s3://<bucket>/jobs/<job_id>/checkpoints/step-000500/{files..., manifest.json}
beside config/run-NNN.json (the run spec of attempt NNN), logs/ and metrics.jsonl under s3://<bucket>/jobs/<job_id>/.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "manifest.json"
CHECKPOINT_PREFIX = "checkpoints"


def checkpoint_id_for(step: int) -> str:
    return f"step-{step:06d}"


def step_of(checkpoint_id: str) -> int:
    """Inverse of checkpoint_id_for; raises ValueError for anything else."""
    prefix, _, digits = checkpoint_id.partition("-")
    if prefix != "step" or not digits.isdigit():
        raise ValueError(f"not a checkpoint id: {checkpoint_id!r}")
    return int(digits)


class ManifestFile(BaseModel):
    model_config = ConfigDict(defer_build=True)
    path: str = Field(description="Relative to the checkpoint directory.")
    size: int
    sha256: str


class CheckpointManifest(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    checkpoint_id: str
    job_id: str | None = None
    attempt: int = 1
    step: int
    epoch: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    files: list[ManifestFile]
    training_type: str | None = None
    is_adapter: bool = False
    resumed_from: str | None = None
    created_at: datetime
    format_version: int = 1


# --- best and retention: ONE computation for the trainer (what S3 keeps) and the service (what the job record names)


class Scored(Protocol):
    """A checkpoint as both sides see it: CheckpointManifest (trainer) and CheckpointRef (job record)."""

    @property
    def checkpoint_id(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def metrics(self) -> dict[str, float]: ...


C = TypeVar("C", bound=Scored)


def metric_direction(name: str, greater_is_better: bool | None) -> bool:
    """Hugging Face's convention: a metric named *loss is better lower unless told otherwise."""
    if greater_is_better is not None:
        return greater_is_better
    return not name.endswith("loss")


def metric_value(metrics: Mapping[str, float], name: str) -> float | None:
    """The metric by its name, else as the evaluation reported it (`eval_<name>`)."""
    if name in metrics:
        return metrics[name]
    return metrics.get(f"eval_{name}")


def best_checkpoint(checkpoints: Iterable[C], metric: str | None, greater_is_better: bool | None) -> C | None:
    """The best checkpoint by `metric` (or `eval_<metric>`); ties go to the earlier, as in Hugging Face's Trainer."""
    if not metric:
        return None
    greater = metric_direction(metric, greater_is_better)
    scored = [(value, c.step, c) for c in checkpoints if (value := metric_value(c.metrics, metric)) is not None]
    if not scored:
        return None
    chosen = max(scored, key=lambda s: (s[0], -s[1])) if greater else min(scored, key=lambda s: (s[0], s[1]))
    return chosen[2]


def retained(
    checkpoints: Iterable[Scored],
    *,
    save_total_limit: int | None,
    metric: str | None,
    greater_is_better: bool | None,
    resumed_from: str | None = None,
) -> set[str]:
    """The ids retention keeps: the newest save_total_limit (all when unlimited), the best, the resumed-from one."""
    newest = sorted(checkpoints, key=lambda c: c.step)
    keep = {c.checkpoint_id for c in (newest[-save_total_limit:] if save_total_limit else newest)}
    best = best_checkpoint(newest, metric, greater_is_better)
    if best is not None:
        keep.add(best.checkpoint_id)
    if resumed_from and resumed_from in {c.checkpoint_id for c in newest}:
        keep.add(resumed_from)
    return keep
