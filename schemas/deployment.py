"""What a deployment says about itself (GET /deployment), and the code fingerprint both sides compute.

`trainplane doctor` compares a deployment with the installed trainplane: the API's Lambda reports the
fingerprint of the code it runs (`code_fingerprint` over its own `schemas/` and `functions/`), the client
computes the same over the installed copies; a difference means the stack runs other code than the one
the user has (deploy again, or install the deployed version). The fingerprint is the sha256 of every
`*.py` file's path and bytes, so it needs no build step and no version bump to tell two trees apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The packages a Lambda bundle holds of ours (infra/bundling.py SOURCE_PACKAGES): what the fingerprint covers.
FINGERPRINTED_PACKAGES = ("schemas", "functions")


def code_fingerprint(package_dirs: Iterable[Path]) -> str:
    """sha256 (16 hex digits) over each package's `*.py` files, by package-relative path, in path order."""
    digest = hashlib.sha256()
    for package in package_dirs:
        for path in sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts):
            digest.update(f"{package.name}/{path.relative_to(package).as_posix()}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


class InstanceUse(BaseModel):
    """One instance type the deployment would launch, and what would launch it."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    instance_type: str = Field(description="As the engine names it: ml.g5.xlarge on SageMaker, g5.xlarge on EC2.")
    engine: Literal["sagemaker", "ec2"]
    gpus: int = Field(ge=0, description="GPUs per instance.")
    vcpus: int = Field(ge=1, description="vCPUs per instance (EC2's quotas count vCPUs).")
    instances: int = Field(ge=1, description="Instances one such job runs (node_count).")
    used_by: list[str] = Field(description="The defaults and shapes that resolve to it.")


class DeploymentInfo(BaseModel):
    """GET /deployment: the facts a health check needs, as the running API function sees them."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    code_fingerprint: str = Field(description="schemas.deployment.code_fingerprint of the code this function runs.")
    compute: Literal["local", "sagemaker", "ec2"]
    region: str
    event_bus_name: str
    trainer_log_group: str | None = Field(description="Where the trainer's reports are read from; None for local compute.")
    trainer_images: list[str] = Field(description="The trainer image and each training shape's tag of it (none for local compute).")
    image_platforms: list[str] = Field(description="The platforms the trainer image must offer, e.g. linux/amd64.")
    instance_types: list[InstanceUse] = Field(description="Every instance type the defaults and the training shapes use.")
    caller_arn: str = Field(description="Who the API took the caller for.")
    caller_data_uri: str = Field(description="The caller's data area (docs/SECURITY.md), where a smoke test may put its data.")
