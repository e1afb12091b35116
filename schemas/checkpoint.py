"""The checkpoint manifest: written last, so a checkpoint without one does not exist.

Layout (DESIGN.md): s3://<bucket>/jobs/<job_id>/checkpoints/step-000500/{files..., manifest.json}
beside config/run.json, logs/ and metrics.jsonl under s3://<bucket>/jobs/<job_id>/.
"""

from __future__ import annotations

from datetime import datetime

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
