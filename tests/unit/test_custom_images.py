"""A job's own container image (training_config.image; OME's trainer.image; /train's image): which
references and repositories a deployment allows, where it can run, and the 422s naming the field the
caller wrote. What the launchers send: tests/integration/test_launchers_moto.py."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from functions.catalog.images import check_custom_image, entry_allows, parse_image
from functions.errors import InvalidRequest
from functions.service.compat.deepfinery import TrainApi
from functions.service.jobs import JobService
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.access import BucketGrant
from schemas.job import SubmitJobRequest
from schemas.train import TrainRequest
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.helpers.jobs import ALICE, request_body

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
TEAM_IMAGE = f"{ECR}/team/trainer:v1"


@pytest.mark.parametrize(
    ("reference", "registry", "path"),
    [
        ("my-training-image:latest", "docker.io", ("library", "my-training-image")),
        ("pytorch/pytorch:latest", "docker.io", ("pytorch", "pytorch")),
        ("ghcr.io/deepfinery/trainer:latest", "ghcr.io", ("deepfinery", "trainer")),
        (TEAM_IMAGE, ECR, ("team", "trainer")),
        ("localhost:5000/x@sha256:" + "a" * 64, "localhost:5000", ("x",)),
    ],
)
def test_references_are_read_as_docker_reads_them(reference: str, registry: str, path: tuple[str, ...]) -> None:
    image = parse_image(reference)
    assert image is not None and (image.registry, image.path) == (registry, path)


@pytest.mark.parametrize("reference", ["ghcr.io/a/../b", "UPPER/x", "ghcr.io:bad/x", "a b", "ghcr.io/x:", "x@sha256:short", ""])
def test_what_is_no_image_reference_is_none(reference: str) -> None:
    assert parse_image(reference) is None


@pytest.mark.parametrize(
    ("entry", "allowed"),
    [
        (f"{ECR}/team/", True),
        (f"{ECR}/team", True),
        (ECR, True),
        (f"{ECR}/team/trainer", True),
        (f"{ECR}/tea", False),  # component by component: team is not under tea
        (f"{ECR}/team/trainer/gpu", False),
        ("999999999999.dkr.ecr.us-east-1.amazonaws.com/team/", False),
        ("team", False),  # an entry always names its registry
    ],
)
def test_an_entry_allows_its_registry_and_the_repositories_below_its_prefix(entry: str, allowed: bool) -> None:
    image = parse_image(TEAM_IMAGE)
    assert image is not None and entry_allows(entry, image) is allowed


def test_docker_hub_is_allowed_only_by_name() -> None:
    image = parse_image("pytorch/pytorch:latest")
    assert image is not None
    assert entry_allows("docker.io/pytorch", image) and not entry_allows("pytorch", image)


def service(compute: str = "sagemaker", allowed: tuple[str, ...] = (f"{ECR}/team/", "ghcr.io/deepfinery"), **settings: Any) -> JobService:
    counter = itertools.count(1)
    config = Settings(compute=compute, custom_image_repositories=allowed, trainer_image_uri=f"{ECR}/trainplane:1", **settings)  # type: ignore[arg-type]
    return JobService(InMemoryJobRepository(), InMemoryArtifactStore(), None, config, ids=lambda: f"job-{next(counter)}")


def with_image(image: str, **body: Any) -> SubmitJobRequest:
    request = request_body(**body)
    request["training_config"]["image"] = image
    return SubmitJobRequest.model_validate(request)


def refusal(svc: JobService, request: SubmitJobRequest) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        svc.submit(request, Principal(ALICE))
    return caught.value


def test_an_allowed_image_is_recorded_on_the_job() -> None:
    for compute in ("sagemaker", "ec2"):
        job = service(compute).submit(with_image(TEAM_IMAGE), Principal(ALICE))
        assert job.training_config.image == TEAM_IMAGE


@pytest.mark.parametrize(
    ("svc", "image", "words"),
    [
        (lambda: service("local"), TEAM_IMAGE, "no container runtime"),
        (lambda: service("sagemaker", local_state_dir="/tmp/state"), TEAM_IMAGE, "local mode's emulated compute 'sagemaker'"),
        (lambda: service("ec2", allowed=()), TEAM_IMAGE, "allows no custom images"),
        (lambda: service("ec2"), f"{ECR}/other/trainer:v1", "custom_image_repositories"),
        (lambda: service("ec2"), "my-training-image:latest", "not from a registry or repository this deployment allows"),
        (lambda: service("sagemaker"), "ghcr.io/deepfinery/trainer:latest", "Amazon ECR only"),
        (lambda: service("ec2"), "ghcr.io/a/../b", "not a container image reference"),
    ],
)
def test_an_image_that_cannot_run_here_is_a_422_naming_the_field(svc: Any, image: str, words: str) -> None:
    error = refusal(svc(), with_image(image))
    assert error.field == "training_config.image" and words in error.message


def test_ec2_runs_an_allowed_image_of_another_registry() -> None:
    job = service("ec2").submit(with_image("ghcr.io/deepfinery/trainer:latest"), Principal(ALICE))
    assert job.training_config.image == "ghcr.io/deepfinery/trainer:latest"


def test_omes_trainer_image_is_the_jobs_image_and_its_refusal_names_trainer_image() -> None:
    body = request_body()
    ome = {"image": TEAM_IMAGE, "command": ["python", "train.py"]}
    job = service("ec2").submit(SubmitJobRequest.model_validate({**body, "trainer": ome}), Principal(ALICE))
    assert job.training_config.image == TEAM_IMAGE and job.training_config.framework.command == ["python", "train.py"]
    error = refusal(service("local"), SubmitJobRequest.model_validate({**body, "trainer": ome}))
    assert error.field == "trainer.image" and "no container runtime" in error.message


def test_trains_image_runs_where_it_can_and_its_refusal_names_image() -> None:
    grants = (BucketGrant(uri="s3://runs/", access="read-write"), BucketGrant(uri="s3://data/", access="read"))
    train = {"framework": "hf", "model_id": "sshleifer/tiny-gpt2", "run_id": "r1", "checkpoint_base_uri": "s3://runs/b"}
    request = TrainRequest.model_validate({**train, "dataset_uri": "s3://data/d.jsonl", "image": TEAM_IMAGE})
    status = TrainApi(service("ec2", bucket_grants=grants)).submit(request, Principal(ALICE))
    assert status.status == "submitted"
    with pytest.raises(InvalidRequest) as caught:
        TrainApi(service("local", bucket_grants=grants)).submit(request, Principal(ALICE))
    assert caught.value.field == "image" and "no container runtime" in caught.value.message


def test_the_check_itself_names_what_it_is_given() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_custom_image("x.image", "ghcr.io/x:1", ("ghcr.io/y",), "ec2", local_mode=False)
    assert caught.value.field == "x.image"
