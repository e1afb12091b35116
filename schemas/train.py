"""DeepFinery's training API (seeds/004): POST /train's unified payload and GET /train/{run_id}'s status.

The payload becomes an ordinary trainplane job (functions/service/compat/deepfinery.py says how each field
maps); the status is the seed's `{status: submitted|running|failed|succeeded, detail}`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.bounds import MAX_ANNOTATIONS, MAX_EXTRA_ARGS, MAX_LABELS, MAX_TRAIN_ENV, key_count
from schemas.configs import Strict, StrMap

RunId = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
ExtraArg = str | int | float | bool


class TrainRequest(Strict):
    framework: Literal["hf", "meta", "nemo"] = Field(description="hf -> HF_TRAINER, meta -> FSDP; nemo is refused (not supported yet).")
    model_id: str = Field(min_length=1, max_length=1024, description="Hub id, s3:// prefix or local path of the base model.")
    run_id: RunId = Field(description="Unique per run; names the job and the run's prefix under checkpoint_base_uri.")
    num_nodes: int = Field(default=1, ge=1, le=256)
    gpus_per_node: int = Field(default=0, ge=0, le=1024)
    cpus_per_node: int | None = Field(default=None, ge=1, le=4096)
    memory_per_node_gb: int | None = Field(default=None, ge=1, le=65_536)
    image: str | None = Field(default=None, max_length=512, description="training_config.image (SageMaker/EC2 only).")
    checkpoint_base_uri: str = Field(min_length=1, max_length=1024, description="The prefix of every run: <base>/<run_id>/framework=<f>/.")
    dataset_uri: str = Field(min_length=1, max_length=1024, description="JSONL ({'text': ...} by default).")
    resume_from_checkpoint: bool = Field(default=False, description="Resume from the highest step under the run's checkpoints/.")
    config_path: str | None = Field(default=None, max_length=1024, description="Not supported yet (refused when given).")
    extra_args: Annotated[dict[Annotated[str, Field(min_length=1, max_length=128)], ExtraArg], key_count(MAX_EXTRA_ARGS)] = Field(
        default_factory=dict, max_length=MAX_EXTRA_ARGS
    )
    env: Annotated[StrMap, key_count(MAX_TRAIN_ENV)] = Field(default_factory=dict, max_length=MAX_TRAIN_ENV)
    labels: Annotated[dict[str, str], key_count(MAX_LABELS)] = Field(default_factory=dict, max_length=MAX_LABELS)
    annotations: Annotated[dict[str, str], key_count(MAX_ANNOTATIONS)] = Field(default_factory=dict, max_length=MAX_ANNOTATIONS)


class TrainStatus(BaseModel):
    """GET /train/{run_id}: the newest job of that run, in the seed's words."""

    model_config = ConfigDict(defer_build=True)
    status: Literal["submitted", "running", "failed", "succeeded"]
    detail: str | None = None
    run_id: str
    job_id: str
