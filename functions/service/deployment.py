"""GET /deployment: what `trainplane doctor` needs to know of the deployment, from the code that runs it.

The instance types come from the one instance table (instances.py) as a job would resolve them: the
default GPU job (resource_config's defaults), a CPU job (gpu_count 0: the smoke test's) and every
training shape of the catalog, on the deployment's engine. The code fingerprint is computed on the
first request (a few ms over ~200 files), never at import: the cold start stays as it was.
"""

from __future__ import annotations

import functools
from pathlib import Path

from functions import constants
from functions.catalog.images import trainer_image
from functions.catalog.instances import Platform, select_instance, spec_for
from functions.service.paths import data_prefix
from functions.settings import Settings
from schemas.configs import ResourceConfig
from schemas.deployment import FINGERPRINTED_PACKAGES, DeploymentInfo, InstanceUse, code_fingerprint
from schemas.shapes import TrainingShapeProfile

_ROOT = Path(__file__).resolve().parents[2]  # the directory holding schemas/ and functions/ (repo or bundle)


@functools.cache
def running_fingerprint() -> str:
    return code_fingerprint(_ROOT / name for name in FINGERPRINTED_PACKAGES)


def deployment_info(settings: Settings, shapes: list[TrainingShapeProfile], caller: str) -> DeploymentInfo:
    engine = settings.compute
    cloud = engine in ("sagemaker", "ec2")
    log_group = None
    if engine == "sagemaker":
        log_group = constants.SAGEMAKER_TRAINING_LOG_GROUP
    elif engine == "ec2":
        log_group = settings.trainer_log_group
    images: list[str] = []
    if cloud and settings.trainer_image_uri:
        images = list(dict.fromkeys([settings.trainer_image_uri, *(trainer_image(settings.trainer_image_uri, s) for s in shapes)]))
    return DeploymentInfo(
        code_fingerprint=running_fingerprint(),
        compute=engine,
        region=settings.region,
        event_bus_name=settings.event_bus_name,
        trainer_log_group=log_group,
        trainer_images=images,
        image_platforms=list(constants.TRAINER_IMAGE_PLATFORMS) if cloud else [],
        instance_types=instance_uses(engine, shapes) if engine == "sagemaker" or engine == "ec2" else [],
        caller_arn=caller,
        caller_data_uri=f"s3://{settings.artifacts_bucket}/{data_prefix(caller)}",
    )


def instance_uses(engine: Platform, shapes: list[TrainingShapeProfile]) -> list[InstanceUse]:
    """Each instance type the defaults and the shapes resolve to on `engine`, with who uses it."""
    wanted: list[tuple[str, ResourceConfig, TrainingShapeProfile | None]] = [
        ("a job's default resources (1 GPU)", ResourceConfig(), None),
        ("a CPU job (gpu_count 0)", ResourceConfig(gpu_count=0), None),
    ]
    for shape in shapes:
        resources = ResourceConfig(gpu_count=shape.accelerator_count, gpu_type=shape.accelerator_type, node_count=shape.node_count)
        wanted.append((f"training shape {shape.ref}", resources, shape))
    uses: dict[str, InstanceUse] = {}
    for who, resources, pinned in wanted:
        choice = select_instance(resources, engine, pinned)
        name = choice.instance_type
        known = uses.get(name)
        spec = spec_for(name)
        uses[name] = InstanceUse(
            instance_type=name,
            engine=engine,
            gpus=spec.gpus,
            vcpus=spec.vcpus,
            instances=max(choice.instance_count, known.instances if known else 1),
            used_by=[*(known.used_by if known else []), who],
        )
    return list(uses.values())
