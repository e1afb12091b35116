"""Training shapes (seeds/003): the catalog (defaults + the deployment's), resolution at submit, versions,
conflicts (422 naming the field), the record on the job, retries pinned to the version, and what the
cloud launchers do with a shape (its instance type, its image tag)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from functions.adapters.launchers.ec2 import build_run_instances_request, render_user_data
from functions.adapters.launchers.sagemaker import build_training_job_request
from functions.catalog.images import trainer_image
from functions.catalog.instances import select_instance
from functions.catalog.shapes import DEFAULT_SHAPES, ShapeCatalog, catalog_from_json
from functions.errors import InvalidRequest, ShapeNotFound
from functions.service.compat.shapes import apply_shape
from functions.service.jobs import JobService
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.api import PatchJobRequest, RetryRequest
from schemas.configs import DType, FrameworkType, ResourceConfig
from schemas.job import SubmitJobRequest
from schemas.shapes import TrainingShapeProfile, parse_shape_ref
from schemas.status import JobStatus
from tests.cloud_fixtures import IMAGE, cloud_settings, make_launch_request
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.helpers.jobs import ALICE, request_body

alice = Principal(ALICE)

H100_V2 = {
    "name": "h100-8x",
    "training_shape_version": 2,
    "accelerator_type": "H100",
    "accelerator_count": 8,
    "node_count": 2,
    "instance_types": {"sagemaker": "ml.p5.48xlarge", "ec2": "p5.48xlarge"},
    "trainer_image_tag": "2.1-cu124",
    "max_supported_context_length": 65536,
    "framework": "DEEPSPEED",
    "framework_config": {"zero_stage": "3"},
    "base_model_weight_precision": "bfloat16",
}


def shaped(shape: str, **resources: Any) -> SubmitJobRequest:
    body = request_body(resource_config={"training_shape": shape, **resources})
    body["data_config"] = {"sources": [{"path": "s3://trainplane-artifacts/shared/train.jsonl"}]}
    return SubmitJobRequest.model_validate(body)


def service(shapes: str = "", compute: str = "local") -> JobService:
    counter = itertools.count(1)
    settings = Settings(training_shapes=shapes, compute=compute, **({"trainer_image_uri": IMAGE} if compute != "local" else {}))
    return JobService(InMemoryJobRepository(), InMemoryArtifactStore(), None, settings, ids=lambda: f"job-{next(counter):04d}")


# --- the catalog ---------------------------------------------------------------------------------


def test_the_defaults_cover_the_gpu_families_and_each_is_consistent_with_the_instance_table() -> None:
    catalog = catalog_from_json("")
    assert {"h100-8x", "a100-80gb-8x", "a100-40gb-8x", "l40s-1x", "l4-1x", "a10g-1x", "a10g-4x", "t4-1x", "cpu"} <= set(catalog.names())
    for profile in DEFAULT_SHAPES:
        assert set(profile.instance_types) == {"sagemaker", "ec2"}
        for compute, instance_type in profile.instance_types.items():
            resources = ResourceConfig(gpu_count=profile.accelerator_count, gpu_type=profile.accelerator_type)
            assert select_instance(resources, compute, profile).instance_type == instance_type


def test_a_deployment_adds_versions_and_the_latest_wins_unless_one_is_named() -> None:
    catalog = catalog_from_json(json.dumps([H100_V2]))
    assert catalog.get("h100-8x").training_shape_version == 2
    assert catalog.get("h100-8x", 1).node_count == 1
    assert [p.ref for p in catalog.profiles() if p.name == "h100-8x"] == ["h100-8x@1", "h100-8x@2"]
    with pytest.raises(ShapeNotFound):
        catalog.get("h100-8x", 3)
    with pytest.raises(ShapeNotFound):
        catalog.get("tpu-v5")


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"instance_types": {"ec2": "p9.48xlarge"}}, "unknown ec2 instance type"),
        ({"instance_types": {"sagemaker": "p5.48xlarge"}}, "start with ml."),
        ({"accelerator_type": "A10G"}, "carries no A10G"),
        ({"accelerator_count": 16}, "has 8 GPUs"),
        ({"framework_config": {"zero_stage": "3"}, "framework": None}, "framework_config needs framework"),
    ],
)
def test_a_bad_deployment_shape_fails_when_the_catalog_is_built(change: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        catalog_from_json(json.dumps([{**H100_V2, **change}]))


def test_shape_references() -> None:
    assert parse_shape_ref("a100-80gb-8x") == ("a100-80gb-8x", None)
    assert parse_shape_ref("a100-80gb-8x@12") == ("a100-80gb-8x", 12)
    for bad in ("A100", "x@0", "x@", "@1", "x@1@2"):
        with pytest.raises(ValueError):
            parse_shape_ref(bad)


# --- resolving at submit -------------------------------------------------------------------------


def test_a_job_naming_a_shape_gets_its_resources_framework_precision_and_context() -> None:
    catalog = catalog_from_json(json.dumps([H100_V2]))
    resolved, profile = apply_shape(shaped("h100-8x"), catalog)
    assert profile is not None and profile.ref == "h100-8x@2"
    rc, tc = resolved.resource_config, resolved.training_config
    assert (rc.gpu_count, rc.gpu_type, rc.node_count, rc.training_shape) == (8, "H100", 2, "h100-8x@2")
    assert tc.framework.type == FrameworkType.DEEPSPEED and tc.framework.config == {"zero_stage": "3"}
    assert tc.base_model.dtype == DType.BFLOAT16
    assert resolved.data_config.max_seq_length == 65536
    # What the shape does not own stays the job's
    assert tc.hyperparameters == {"max_steps": "4", "learning_rate": "0.001"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"resource_config": {"gpu_count": 4}}, "resource_config.gpu_count"),
        ({"resource_config": {"gpu_type": "A100"}}, "resource_config.gpu_type"),
        ({"resource_config": {"node_count": 1}}, "resource_config.node_count"),
        ({"training_config": {"framework": {"type": "FSDP"}}}, "training_config.framework.type"),
        ({"training_config": {"framework": {"type": "DEEPSPEED", "config": {"zero_stage": "2"}}}}, "training_config.framework.config"),
        ({"training_config": {"base_model": {"dtype": "float32"}}}, "training_config.base_model.dtype"),
        ({"data_config": {"max_seq_length": 131072}}, "data_config.max_seq_length"),
    ],
)
def test_a_field_the_shape_owns_set_otherwise_by_the_job_is_refused_naming_it(overrides: dict[str, Any], field: str) -> None:
    catalog = catalog_from_json(json.dumps([H100_V2]))
    body = shaped("h100-8x").model_dump(mode="json", exclude_unset=True)
    for section, values in overrides.items():
        target = body.setdefault(section, {})
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            else:
                target[key] = value
    with pytest.raises(InvalidRequest) as caught:
        apply_shape(SubmitJobRequest.model_validate(body), catalog)
    assert caught.value.field == field
    assert "h100-8x@2" in caught.value.message


def test_the_same_value_as_the_shape_is_no_conflict_and_a_smaller_context_is_kept() -> None:
    catalog = catalog_from_json("")
    body = shaped("a10g-4x", gpu_count=4).model_dump(mode="json", exclude_unset=True)
    body["data_config"]["max_seq_length"] = 1024
    resolved, profile = apply_shape(SubmitJobRequest.model_validate(body), catalog)
    assert profile is not None and resolved.resource_config.gpu_count == 4 and resolved.data_config.max_seq_length == 1024


def test_an_unknown_shape_or_version_is_a_422_naming_training_shape_and_the_known_ones() -> None:
    for ref in ("tpu-v5", "h100-8x@7"):
        with pytest.raises(InvalidRequest) as caught:
            apply_shape(shaped(ref), catalog_from_json(""))
        assert caught.value.field == "resource_config.training_shape"
        assert "a100-80gb-8x" in caught.value.message


def test_a_shape_the_schema_cannot_combine_with_the_job_is_refused() -> None:
    # A QLORA job (4-bit kernels: CUDA only) on the CPU shape
    body = request_body(resource_config={"training_shape": "cpu"})
    body["training_config"]["training_type"] = "QLORA"
    with pytest.raises(InvalidRequest, match="with training shape cpu@1: QLORA needs a GPU"):
        apply_shape(SubmitJobRequest.model_validate(body), catalog_from_json(""))


@pytest.mark.parametrize(
    ("framework", "config", "complaint"),
    [("DEEPSPEED", {"offload_optimizer_device": "cpu"}, "ZeRO-Offload"), ("MEGATRON", None, "MEGATRON framework is not supported")],
)
def test_a_shape_with_framework_settings_the_schema_refuses_fails_at_start_up(framework: str, config: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        catalog_from_json(json.dumps([{**H100_V2, "framework": framework, "framework_config": config}]))


# --- on the job ----------------------------------------------------------------------------------


def test_the_resolved_profile_is_recorded_on_the_job_and_a_retry_keeps_its_version() -> None:
    svc = service(json.dumps([H100_V2]))
    job = svc.submit(shaped("h100-8x@1"), alice)
    assert job.training_shape is not None and job.training_shape.ref == "h100-8x@1"
    assert job.resource_config.gpu_count == 8 and job.resource_config.training_shape == "h100-8x@1"
    # When the job fails and is retried (the deployment's latest is now @2)
    failed = svc.repo.get(job.job_id).model_copy(update={"status": JobStatus.FAILED})
    svc.repo.jobs[job.job_id] = failed  # type: ignore[attr-defined]
    child = svc.retry(job.job_id, alice, RetryRequest())
    # Then the child runs on the same version, with the same resources
    assert child.training_shape == job.training_shape
    assert child.resource_config.node_count == 1 and child.training_config.framework.type == FrameworkType.FSDP


def test_a_latest_reference_is_pinned_to_the_version_it_resolved_to() -> None:
    job = service(json.dumps([H100_V2]), compute="sagemaker").submit(shaped("h100-8x"), alice)  # 2 nodes: not compute 'local'
    assert job.resource_config.training_shape == "h100-8x@2"
    assert job.training_shape is not None and job.training_shape.trainer_image_tag == "2.1-cu124"


def test_patching_resources_resolves_the_shape_they_name_again() -> None:
    svc = service()
    job = svc.submit(SubmitJobRequest.model_validate(request_body()), alice)
    edited = svc.patch(job.job_id, alice, PatchJobRequest(resource_config=ResourceConfig(training_shape="cpu")))
    assert edited.training_shape is not None and edited.training_shape.ref == "cpu@1"
    with pytest.raises(InvalidRequest) as caught:
        svc.patch(job.job_id, alice, PatchJobRequest(resource_config=ResourceConfig(training_shape="cpu", gpu_count=2)))
    assert caught.value.field == "resource_config.gpu_count"
    plain = svc.patch(job.job_id, alice, PatchJobRequest(resource_config=ResourceConfig(gpu_count=0)))
    assert plain.training_shape is None


def test_submit_on_cloud_compute_checks_the_shapes_instance_and_the_job_together() -> None:
    svc = service(compute="sagemaker")
    job = svc.submit(shaped("a10g-1x"), alice)
    assert job.training_shape is not None and job.training_shape.instance_types["sagemaker"] == "ml.g5.2xlarge"
    # A minimum the shape's instance cannot meet is still refused, naming the job's field
    with pytest.raises(InvalidRequest) as caught:
        svc.submit(shaped("a10g-1x", cpu_cores=64), alice)
    assert caught.value.field == "resource_config.cpu_cores"


# --- what the launchers do with it ----------------------------------------------------------------


def _shaped_launch(profile: TrainingShapeProfile) -> Any:
    request = make_launch_request(resources=ResourceConfig(gpu_count=profile.accelerator_count, gpu_type=profile.accelerator_type))
    return type(request)(**{**request.__dict__, "run_spec": request.run_spec.model_copy(update={"training_shape": profile})})


def test_sagemaker_and_ec2_use_the_shapes_instance_type_and_image_tag() -> None:
    profile = TrainingShapeProfile.model_validate({**H100_V2, "node_count": 1})
    request = _shaped_launch(profile)
    params = build_training_job_request(request, cloud_settings())
    assert params["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge"
    assert params["AlgorithmSpecification"]["TrainingImage"] == IMAGE.rsplit(":", 1)[0] + ":2.1-cu124"
    ec2 = build_run_instances_request(request, cloud_settings())
    assert ec2["InstanceType"] == "p5.48xlarge"
    assert IMAGE.rsplit(":", 1)[0] + ":2.1-cu124" in render_user_data(
        request, cloud_settings(), select_instance(request.run_spec.resource_config, "ec2", profile)
    )


def test_a_pinned_instance_type_beats_a_cheaper_one() -> None:
    # 1 x A10G alone would be a g5.xlarge; the shape pins g5.2xlarge
    profile = next(p for p in DEFAULT_SHAPES if p.name == "a10g-1x")
    assert select_instance(ResourceConfig(gpu_count=1, gpu_type="A10G"), "sagemaker").instance_type == "ml.g5.xlarge"
    assert select_instance(ResourceConfig(gpu_count=1, gpu_type="A10G"), "sagemaker", profile).instance_type == "ml.g5.2xlarge"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("123.dkr.ecr.us-east-1.amazonaws.com/trainer:1.0", "123.dkr.ecr.us-east-1.amazonaws.com/trainer:t2"),
        ("123.dkr.ecr.us-east-1.amazonaws.com/trainer", "123.dkr.ecr.us-east-1.amazonaws.com/trainer:t2"),
        ("localhost:5000/trainer@sha256:abc", "localhost:5000/trainer:t2"),
        ("localhost:5000/trainer", "localhost:5000/trainer:t2"),
    ],
)
def test_trainer_image_tag_replacement(uri: str, expected: str) -> None:
    profile = TrainingShapeProfile(name="x", trainer_image_tag="t2")
    assert trainer_image(uri, profile) == expected
    assert trainer_image(uri, None) == uri
    assert trainer_image(uri, TrainingShapeProfile(name="x")) == uri


def test_catalog_profiles_are_sorted_by_name_then_version() -> None:
    catalog = ShapeCatalog(
        [TrainingShapeProfile(name="b", training_shape_version=2), TrainingShapeProfile(name="b"), TrainingShapeProfile(name="a")]
    )
    assert [p.ref for p in catalog.profiles()] == ["a@1", "b@1", "b@2"]
