"""Training shapes that carry placement candidates (issue 26 point 1, docs/PLACEMENT.md "Training shapes"):
checked when the catalog is built, inherited by a job naming the shape (its own list replaces it), checked
again at submit with the job's batch, and run with the shape's instance type only on the shape's own GPUs."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.adapters.launchers.ec2 import build_run_instances_request
from functions.catalog import placement as rules
from functions.catalog.shapes import catalog_from_json
from functions.errors import InvalidRequest
from functions.service.jobs import JobService
from functions.service.placement import PlacementService, placement_fields
from functions.service.principal import Principal
from functions.service.run_specs import RunSpecs
from functions.settings import Settings
from schemas.job import SubmitJobRequest
from tests.cloud_fixtures import IMAGE, cloud_settings, make_launch_request
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.helpers.jobs import ALICE, request_body
from tests.placement_support import InMemoryPoolHealth

alice = Principal(ALICE)
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

H100_SPOT = {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "spot"}
A100_SPOT = {"gpu_type": "A100", "gpus_per_node": 8, "purchase": "spot"}
L40S_4 = {"gpu_type": "L40S", "gpus_per_node": 4, "purchase": "spot"}
H100_OD = {"gpu_type": "H100", "gpus_per_node": 8, "purchase": "on_demand"}


def _shape(*candidates: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": "h100-fallbacks",
        "accelerator_type": "H100",
        "accelerator_count": 8,
        "instance_types": {"ec2": "p5.48xlarge", "sagemaker": "ml.p5.48xlarge"},
        "framework": "FSDP",
        "placement": {"candidates": list(candidates)},
        **extra,
    }


SHAPE = _shape(H100_SPOT, A100_SPOT, L40S_4, H100_OD)


def _service(shapes: list[dict[str, Any]], compute: str = "ec2") -> JobService:
    counter = itertools.count(1)
    settings = Settings(training_shapes=json.dumps(shapes), compute=compute, trainer_image_uri=IMAGE)
    return JobService(InMemoryJobRepository(), InMemoryArtifactStore(), None, settings, ids=lambda: f"job-{next(counter):04d}")


def _submit(svc: JobService, batch: int = 4, accumulation: int = 1, **resources: Any) -> Any:
    body = request_body(resource_config={"training_shape": "h100-fallbacks", **resources})
    body["training_config"]["training_type"] = "SFT"
    body["data_config"] = {
        "sources": [{"path": "s3://trainplane-artifacts/shared/train.jsonl"}],
        "batch_size": batch,
        "gradient_accumulation_steps": accumulation,
    }
    return svc.submit(SubmitJobRequest.model_validate(body), alice)


# --- at shape creation (the catalog is built at start-up and by the CDK config) -------------------


@pytest.mark.parametrize(
    ("shape", "complaint"),
    [
        (_shape(A100_SPOT, H100_SPOT), r"candidates\[0\] \(ec2/A100x8x1/spot\) is not the shape's own"),
        (_shape({**H100_SPOT, "gpus_per_node": 4}), "candidates\\[0\\] is the shape's own GPUs"),
        (_shape(H100_SPOT, {"gpu_type": "Z80"}), r"candidates\[1\] \(ec2/Z80x1x1/spot\): .*unknown GPU type"),
        (_shape(H100_SPOT, {"gpu_type": "L4", "gpus_per_node": 64}), r"candidates\[1\] .*has 64 GPUs"),
        (_shape(H100_SPOT, L40S_4, framework="DEEPSPEED"), r"candidates\[1\] .*DEEPSPEED checkpoint holds each of its 8"),
        (_shape(H100_SPOT, {**A100_SPOT, "platform": "sagemaker"}), r"candidates\[1\]: this deployment launches on ec2"),
        (_shape(H100_SPOT, H100_OD) | {"placement": {"candidates": [H100_SPOT, H100_OD], "deadline": "2030-01-01T00:00:00Z"}}, "deadline"),
        (_shape(H100_SPOT) | {"accelerator_count": 0, "accelerator_type": None, "instance_types": {}}, "CPU-only shape"),
    ],
)
def test_a_shape_whose_candidates_cannot_run_or_resume_fails_when_the_catalog_is_built(shape: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        catalog_from_json(json.dumps([shape]), compute="ec2")


def test_a_deepspeed_shape_may_change_the_gpu_type_at_the_same_world_size() -> None:
    catalog = catalog_from_json(json.dumps([_shape(H100_SPOT, A100_SPOT, H100_OD, framework="DEEPSPEED")]), compute="ec2")
    profile = catalog.get("h100-fallbacks")
    assert profile.placement is not None and len(profile.placement.candidates) == 3


# --- at submit ------------------------------------------------------------------------------------


def test_a_job_naming_the_shape_inherits_its_candidates_with_the_global_batch_kept() -> None:
    # Given a deployment shape with four candidates
    svc = _service([SHAPE])
    # When a job names it without a placement of its own
    job = _submit(svc, batch=4, accumulation=2)
    # Then it carries the shape's candidates and counts as candidate 0 (8 x H100)
    assert job.resource_config.placement == job.training_shape.placement
    assert [c.gpu_type for c in job.resource_config.placement.candidates] == ["H100", "A100", "L40S", "H100"]
    assert (job.resource_config.gpu_type, job.resource_config.gpu_count) == ("H100", 8)
    # And every candidate keeps the global batch of 4 x 2 x 8 = 64
    rows = rules.adaptations(job.resource_config, job.training_config, job.data_config)
    assert [(world, per * acc * world) for world, per, acc, _ in rows] == [(8, 64), (8, 64), (4, 64), (8, 64)]
    assert rows[2][1:3] == (4, 4)


def test_the_jobs_own_candidates_replace_the_shapes_but_candidate_0_stays_the_shapes_gpus() -> None:
    svc = _service([SHAPE])
    job = _submit(svc, placement={"candidates": [H100_SPOT, H100_OD]})
    assert [c.purchase.value for c in job.resource_config.placement.candidates] == ["spot", "on_demand"]
    with pytest.raises(InvalidRequest) as caught:
        _submit(svc, placement={"candidates": [A100_SPOT, H100_OD]})
    assert caught.value.field == "resource_config.placement.candidates[0]"
    assert "h100-fallbacks@1" in caught.value.message


def test_an_inherited_candidate_the_jobs_batch_cannot_reach_is_a_422_naming_it() -> None:
    # Given the shape's 4-GPU candidate and a job whose global batch is 1 x 1 x 8 = 8 ... that divides;
    # a 3-GPU candidate cannot take 8: the shape is valid, the job's batch is what fails
    svc = _service([_shape(H100_SPOT, {"gpu_type": "L4", "gpus_per_node": 3}, H100_OD)])
    with pytest.raises(InvalidRequest) as caught:
        _submit(svc, batch=1)
    assert caught.value.field == "resource_config.placement.candidates[1]"
    assert "does not divide among 3 workers" in caught.value.message
    # And a batch that splits is accepted (24 = 3 x 8)
    assert _submit(svc, batch=3).resource_config.placement is not None


# --- at launch: the shape's instance type on its own GPUs only ------------------------------------


def test_each_candidate_runs_on_its_own_instance_type_and_keeps_the_shapes_image_tag() -> None:
    svc = _service([{**SHAPE, "trainer_image_tag": "2.1-cu124", "instance_types": {"ec2": "p5.48xlarge"}}])
    job = _submit(svc)
    candidates = rules.resolve(job.resource_config, job.training_shape)
    assert [c.choice.instance_type for c in candidates] == ["p5.48xlarge", "p4d.24xlarge", "g6e.12xlarge", "p5.48xlarge"]
    # When H100 spot's pool is blocked, the next attempt goes to A100 spot
    health = InMemoryPoolHealth()
    health.block("ec2/p5.48xlarge/any/spot", T0.timestamp() + 3600)
    service = PlacementService(health, lambda: T0)
    job = job.model_copy(update={"attempt": 1, **placement_fields(service.choose(job, 1))})
    spec = RunSpecs(InMemoryArtifactStore(), "bucket").run_spec(job, 1, None)
    # Then its run spec's shape no longer pins p5 and the launcher picks the A100 instance, with the shape's tag
    assert spec.training_shape is not None and spec.training_shape.instance_types == {}
    assert spec.training_shape.trainer_image_tag == "2.1-cu124"
    request = make_launch_request(job_id=job.job_id)
    request = type(request)(**{**request.__dict__, "run_spec": spec})
    assert build_run_instances_request(request, cloud_settings())["InstanceType"] == "p4d.24xlarge"
