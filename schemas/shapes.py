"""Training shapes (seeds/003): named, versioned resource profiles that a job names instead of
spelling its resources out (`resource_config.training_shape: "a100-80gb-8x"` or `"a100-80gb-8x@2"`).

A shape owns the fields it sets: the job may not set them too (a 422 naming the field). The profile
the job resolved to, with its version, is recorded on the job (`resource_config.shape`), so that a
retry or a resume runs on exactly the same profile even after the deployment adds a newer version.
Field names follow the seed's TrainingShapeProfile where they mean the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.configs import DType, FrameworkType, StrMap
from schemas.placement import PlacementConfig

ShapeName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$")]
# "name" (the latest version) or "name@version".
SHAPE_REF = re.compile(r"^(?P<name>[a-z0-9][a-z0-9._-]{0,63})(?:@(?P<version>[1-9][0-9]{0,5}))?$")
Compute = Literal["sagemaker", "ec2"]


class TrainingShapeProfile(BaseModel):
    """One version of a shape. `instance_types` maps a compute engine to the instance type it uses
    (SageMaker's ml.* name, EC2's plain one); local mode runs it on this machine's GPUs (or CPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: ShapeName
    training_shape_version: int = Field(default=1, ge=1, le=999_999)
    description: str = Field(default="", max_length=1024)
    accelerator_type: str | None = Field(default=None, max_length=64, description="resource_config.gpu_type, e.g. H100, A100-80GB.")
    accelerator_count: int = Field(default=1, ge=0, le=1024, description="resource_config.gpu_count: GPUs per node (0: CPU only).")
    node_count: int = Field(default=1, ge=1, le=256, description="resource_config.node_count.")
    instance_types: dict[Compute, str] = Field(default_factory=dict, description="Per compute engine, the instance type.")
    trainer_image_tag: str | None = Field(
        default=None, max_length=128, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", description="Tag of the deployment's trainer image."
    )
    max_supported_context_length: int | None = Field(default=None, ge=8, le=1_048_576, description="Caps data_config.max_seq_length.")
    framework: FrameworkType | None = Field(default=None, description="training_config.framework.type (sharding).")
    framework_config: StrMap | None = Field(default=None, description="training_config.framework.config, e.g. zero_stage.")
    base_model_weight_precision: DType | None = Field(default=None, description="training_config.base_model.dtype.")
    placement: PlacementConfig | None = Field(
        default=None,
        description="resource_config.placement a job naming the shape inherits (its own placement replaces it); "
        "candidate 0 is the shape's own GPUs (docs/PLACEMENT.md).",
    )

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.training_shape_version}"

    @model_validator(mode="after")
    def _consistent(self) -> TrainingShapeProfile:
        if self.accelerator_count == 0 and self.accelerator_type:
            raise ValueError("accelerator_type needs accelerator_count >= 1")
        if self.framework_config is not None and self.framework is None:
            raise ValueError("framework_config needs framework")
        if self.placement is not None:
            if self.accelerator_count == 0:
                raise ValueError("placement candidates are GPU placements: a CPU-only shape (accelerator_count 0) cannot have them")
            if self.placement.deadline is not None:
                # A shape serves many jobs; a deadline is one job's instant.
                raise ValueError("placement.deadline is one job's: give it in the job's own resource_config.placement")
            first = self.placement.candidates[0]
            if (first.gpus_per_node, first.nodes) != (self.accelerator_count, self.node_count):
                raise ValueError(
                    f"placement.candidates[0] is the shape's own GPUs: {self.accelerator_count} per node on {self.node_count} "
                    f"node(s), not {first.gpus_per_node} on {first.nodes}"
                )
        return self


class TrainingShapeList(BaseModel):
    model_config = ConfigDict(defer_build=True)
    shapes: list[TrainingShapeProfile] = Field(description="Every version of every shape, by name then version.")


def parse_shape_ref(ref: str) -> tuple[str, int | None]:
    """'a100-80gb-8x' -> (name, None: the latest); 'a100-80gb-8x@2' -> (name, 2); ValueError otherwise."""
    match = SHAPE_REF.match(ref.strip())
    if match is None:
        raise ValueError(f"{ref!r} is not a training shape reference (a name such as a100-80gb-8x, optionally @version)")
    version = match.group("version")
    return match.group("name"), int(version) if version else None


@dataclass(frozen=True)
class OwnedField:
    """A field of the submit request that a shape sets: its API path, the nested model holding it
    ("resources", "framework" or "base_model"), the attribute, and the shape's value."""

    path: str
    model: str
    attr: str
    value: Any


def owned_by(profile: TrainingShapeProfile) -> list[OwnedField]:
    owned = [
        OwnedField("resource_config.gpu_count", "resources", "gpu_count", profile.accelerator_count),
        OwnedField("resource_config.gpu_type", "resources", "gpu_type", profile.accelerator_type),
        OwnedField("resource_config.node_count", "resources", "node_count", profile.node_count),
    ]
    if profile.framework is not None:
        owned.append(OwnedField("training_config.framework.type", "framework", "type", profile.framework))
    if profile.framework_config is not None:
        owned.append(OwnedField("training_config.framework.config", "framework", "config", dict(profile.framework_config)))
    if profile.base_model_weight_precision is not None:
        owned.append(OwnedField("training_config.base_model.dtype", "base_model", "dtype", profile.base_model_weight_precision))
    return owned
