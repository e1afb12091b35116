"""Training shapes: the deployment's catalog (resolving the one a job names: functions/service/compat/shapes.py).

The catalog is the defaults below (the SageMaker/EC2 GPU families of instances.py) plus the
deployment's own shapes (setting `training_shapes`, a JSON list of profiles; CDK context
`training_shapes`): a deployment's profile with the same name and version replaces a default one,
a higher version of a name becomes its latest. Every profile is checked against the instance table
when the catalog is built, so a bad configuration fails at start-up, never at a job's launch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from functions.catalog.instances import parse_gpu_type, spec_for
from functions.catalog.placement import check_shape_candidates
from functions.errors import ShapeNotFound
from schemas.configs import UNSUPPORTED_FRAMEWORKS, DType, FrameworkConfig, FrameworkType
from schemas.shapes import TrainingShapeProfile


def _shape(name: str, gpu: str | None, gpus: int, sagemaker: str, ec2: str, context: int, **extra: Any) -> TrainingShapeProfile:
    return TrainingShapeProfile(
        name=name,
        accelerator_type=gpu,
        accelerator_count=gpus,
        instance_types={"sagemaker": f"ml.{sagemaker}", "ec2": ec2},
        max_supported_context_length=context,
        **extra,
    )


_BF16 = {"base_model_weight_precision": DType.BFLOAT16}
_FSDP = {"framework": FrameworkType.FSDP, **_BF16}
# Sensible starting points per GPU family: one node, the whole instance, FSDP where there are several
# GPUs (bfloat16 where the GPU has it: Ampere and newer), the context a full fine-tune of a 7-8B model
# fits in that memory. T4 (Turing) has no bfloat16: the trainer's automatic precision.
DEFAULT_SHAPES: tuple[TrainingShapeProfile, ...] = (
    _shape("h100-8x", "H100", 8, "p5.48xlarge", "p5.48xlarge", 32_768, description="8x H100 80GB, FSDP, bf16", **_FSDP),
    _shape("a100-80gb-8x", "A100-80GB", 8, "p4de.24xlarge", "p4de.24xlarge", 16_384, description="8x A100 80GB, FSDP, bf16", **_FSDP),
    _shape("a100-40gb-8x", "A100-40GB", 8, "p4d.24xlarge", "p4d.24xlarge", 8_192, description="8x A100 40GB, FSDP, bf16", **_FSDP),
    _shape("l40s-1x", "L40S", 1, "g6e.2xlarge", "g6e.2xlarge", 8_192, description="1x L40S 48GB, bf16", **_BF16),
    _shape("l40s-4x", "L40S", 4, "g6e.12xlarge", "g6e.12xlarge", 8_192, description="4x L40S 48GB, FSDP, bf16", **_FSDP),
    _shape("l4-1x", "L4", 1, "g6.2xlarge", "g6.2xlarge", 4_096, description="1x L4 24GB, bf16 (LoRA)", **_BF16),
    _shape("a10g-1x", "A10G", 1, "g5.2xlarge", "g5.2xlarge", 4_096, description="1x A10G 24GB, bf16 (LoRA)", **_BF16),
    _shape("a10g-4x", "A10G", 4, "g5.12xlarge", "g5.12xlarge", 4_096, description="4x A10G 24GB, FSDP, bf16", **_FSDP),
    _shape("t4-1x", "T4", 1, "g4dn.xlarge", "g4dn.xlarge", 2_048, description="1x T4 16GB (LoRA, small models)"),
    _shape("cpu", None, 0, "m5.2xlarge", "m5.2xlarge", 2_048, description="CPU only: tests, demos, tiny models", **{}),
)


class ShapeCatalog:
    def __init__(self, profiles: Iterable[TrainingShapeProfile], compute: str | None = None) -> None:
        by_ref: dict[tuple[str, int], TrainingShapeProfile] = {}
        for profile in profiles:
            check_profile(profile, compute)
            by_ref[(profile.name, profile.training_shape_version)] = profile
        self._by_ref = dict(sorted(by_ref.items()))

    def profiles(self) -> list[TrainingShapeProfile]:
        return list(self._by_ref.values())

    def get(self, name: str, version: int | None = None) -> TrainingShapeProfile:
        if version is not None:
            found = self._by_ref.get((name, version))
            if found is None:
                raise ShapeNotFound(name, version)
            return found
        versions = [p for (n, _), p in self._by_ref.items() if n == name]
        if not versions:
            raise ShapeNotFound(name)
        return versions[-1]

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._by_ref})


def check_profile(profile: TrainingShapeProfile, compute: str | None = None) -> None:
    """Each instance type exists and carries the shape's accelerators, its framework settings are ones the
    submit schema accepts, and its placement candidates (if any) can run and resume on the deployment's
    `compute` (ValueError naming the shape)."""
    if profile.framework is not None:
        if profile.framework in UNSUPPORTED_FRAMEWORKS:
            raise ValueError(f"training shape {profile.ref}: {UNSUPPORTED_FRAMEWORKS[profile.framework]}")
        try:
            FrameworkConfig(type=profile.framework, config=dict(profile.framework_config or {}))
        except ValidationError as exc:
            raise ValueError(f"training shape {profile.ref}: {exc.errors()[0].get('msg', exc)}") from None
    wanted = parse_gpu_type(profile.accelerator_type) if profile.accelerator_type else None
    for engine, instance_type in profile.instance_types.items():
        try:
            spec = spec_for(instance_type)
        except KeyError:
            raise ValueError(f"training shape {profile.ref}: unknown {engine} instance type {instance_type!r}") from None
        if engine == "sagemaker" and not instance_type.startswith("ml."):
            raise ValueError(f"training shape {profile.ref}: SageMaker instance types start with ml. ({instance_type!r})")
        if not spec.offered_on(engine):
            raise ValueError(f"training shape {profile.ref}: {instance_type} is not offered on {engine}")
        if spec.gpus < profile.accelerator_count or (profile.accelerator_count == 0 and spec.gpus):
            raise ValueError(f"training shape {profile.ref}: {instance_type} has {spec.gpus} GPUs, the shape {profile.accelerator_count}")
        if wanted is not None and (spec.gpu_type != wanted.gpu_type or spec.gpu_memory_mb < (wanted.memory_mb or 0)):
            raise ValueError(f"training shape {profile.ref}: {instance_type} carries no {profile.accelerator_type}")
    check_shape_candidates(profile, compute)


def catalog_from_json(raw: str, defaults: Iterable[TrainingShapeProfile] = DEFAULT_SHAPES, compute: str | None = None) -> ShapeCatalog:
    """The defaults plus the deployment's shapes (a JSON list of profiles; "" for none), checked for `compute`."""
    extra: list[TrainingShapeProfile] = []
    if raw.strip():
        try:
            items = json.loads(raw)
            if not isinstance(items, list):
                raise ValueError("expected a JSON list of training shape profiles")
            extra = [TrainingShapeProfile.model_validate(item) for item in items]
        except (ValueError, ValidationError) as exc:
            raise ValueError(f"setting training_shapes: {exc}") from exc
    return ShapeCatalog([*defaults, *extra], compute)
