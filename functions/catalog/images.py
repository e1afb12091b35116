"""Custom container images (a job's `training_config.image`: OME's trainer.image, /train's image).

A job may run an image of its own instead of the deployment's trainer image, on compute that runs
containers (SageMaker: AlgorithmSpecification.TrainingImage; EC2: the user data pulls and runs it), and
only from the registries/repositories the deployment lists (Settings.custom_image_repositories,
TRAINPLANE_CUSTOM_IMAGE_REPOSITORIES; CDK context `custom_image_repositories`). The image runs with
the training role's rights, like a CUSTOM script (docs/SECURITY.md), and must follow the trainer
contract (docs/TRAINER.md "Custom images").

References are read as Docker reads them: `[registry/]path[:tag][@sha256:digest]`, where the first
component is a registry only if it has a dot or a port or is `localhost`; otherwise the image is on
Docker Hub (`docker.io`, and a one-component path is `library/<name>`). An allowed entry is a registry
(`ghcr.io`), or a registry and a repository prefix (`123456789012.dkr.ecr.us-east-1.amazonaws.com/team/`):
the image's repository must be the prefix or below it, component by component (`team-x` is not under
`team`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from functions.errors import InvalidRequest
from schemas.shapes import TrainingShapeProfile

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
ECR_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class ImageRef:
    registry: str  # lower case, docker.io for Docker Hub
    path: tuple[str, ...]  # the repository's components
    tag: str | None
    digest: str | None

    @property
    def ecr(self) -> bool:
        return ECR_REGISTRY.match(self.registry) is not None


def parse_image(reference: str) -> ImageRef | None:
    """The reference's parts, or None when it is not a Docker image reference."""
    name, _, digest = reference.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        return None
    tag = None
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            return None
    registry, parts = _split_registry(name.split("/"))
    if registry is None or not parts or not all(_COMPONENT.fullmatch(p) for p in parts):
        return None
    if registry == DOCKER_HUB and len(parts) == 1:
        parts = ["library", *parts]
    return ImageRef(registry, tuple(parts), tag, digest or None)


def _split_registry(parts: list[str]) -> tuple[str | None, list[str]]:
    """(registry, repository components): the first component is a registry only if it has a dot or a
    port or is localhost (Docker's rule); None when it looks like one but is not a host name."""
    first = parts[0]
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
        return (first.lower() if _HOST.fullmatch(first) else None), parts[1:]
    return DOCKER_HUB, parts


def entry_allows(entry: str, image: ImageRef) -> bool:
    """Whether one allowed entry covers the image: its first component is always the registry
    (docker.io/... for Docker Hub), the rest a repository prefix, compared component by component."""
    registry, *prefix = entry.strip().rstrip("/").split("/")
    if not valid_entry(entry):
        return False
    return registry.lower() == image.registry and image.path[: len(prefix)] == tuple(prefix)


def valid_entry(entry: str) -> bool:
    registry, *prefix = entry.strip().rstrip("/").split("/")
    return _HOST.fullmatch(registry) is not None and all(_COMPONENT.fullmatch(p) for p in prefix)


def check_custom_image(field: str, reference: str, allowed: tuple[str, ...], compute: str, *, local_mode: bool) -> ImageRef:
    """The submit-time rule for a job's own image: InvalidRequest naming `field` when it cannot run here."""
    if compute == "local" or local_mode:
        where = "compute 'local'" if compute == "local" else f"local mode's emulated compute '{compute}'"
        raise InvalidRequest(
            field,
            f"{where} runs the trainer as a process on this machine, with no container runtime: a custom image "
            "cannot run here. Leave it out (the trainer runs as it is installed here) or submit to a SageMaker or EC2 deployment",
        )
    image = parse_image(reference)
    if image is None:
        raise InvalidRequest(field, f"{reference!r} is not a container image reference ([registry/]repository[:tag][@sha256:digest])")
    if not allowed:
        raise InvalidRequest(field, "this deployment allows no custom images (setting custom_image_repositories is empty)")
    if not any(entry_allows(entry, image) for entry in allowed):
        where = ", ".join(allowed)
        message = f"{reference} is not from a registry or repository this deployment allows (custom_image_repositories: {where})"
        raise InvalidRequest(field, message)
    if compute == "sagemaker" and not image.ecr:
        ecr = "<account>.dkr.ecr.<region>.amazonaws.com/..."
        raise InvalidRequest(field, f"SageMaker runs images from Amazon ECR only ({ecr}); got {reference}")
    return image


def trainer_image(image_uri: str, shape: TrainingShapeProfile | None) -> str:
    """The deployment's trainer image, with the training shape's tag when it names one."""
    if shape is None or not shape.trainer_image_tag:
        return image_uri
    repository = image_uri.split("@", 1)[0]  # a digest pins another build: the shape's tag replaces it
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[: repository.rfind(":")]
    return f"{repository}:{shape.trainer_image_tag}"
