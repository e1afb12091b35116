"""The resource_config -> instance type table (functions/catalog/instances.py)."""

from __future__ import annotations

import pytest

from functions.catalog import instances
from functions.catalog.instances import parse_gpu_type, select_instance, spec_for, validate_resources
from functions.errors import InvalidRequest
from schemas.configs import ResourceConfig


@pytest.mark.parametrize(
    ("resources", "platform", "expected"),
    [
        (ResourceConfig(gpu_count=8, gpu_type="H100"), "sagemaker", "ml.p5.48xlarge"),
        (ResourceConfig(gpu_count=8, gpu_type="H100"), "ec2", "p5.48xlarge"),
        (ResourceConfig(gpu_count=8, gpu_type="A100-80GB"), "sagemaker", "ml.p4de.24xlarge"),
        (ResourceConfig(gpu_count=8, gpu_type="A100"), "ec2", "p4d.24xlarge"),
        (ResourceConfig(gpu_count=8, gpu_type="A100", gpu_memory_min_mb=60_000), "ec2", "p4de.24xlarge"),
        (ResourceConfig(gpu_count=1, gpu_type="A10G"), "sagemaker", "ml.g5.xlarge"),
        (ResourceConfig(gpu_count=1, gpu_type="nvidia a10"), "ec2", "g5.xlarge"),
        (ResourceConfig(gpu_count=2, gpu_type="A10G"), "ec2", "g5.12xlarge"),
        (ResourceConfig(gpu_count=1, gpu_type="A10G", cpu_cores=12, ram_min_mb=40_000), "sagemaker", "ml.g5.4xlarge"),
        (ResourceConfig(gpu_count=1, gpu_type="L4"), "sagemaker", "ml.g6.xlarge"),
        (ResourceConfig(gpu_count=4, gpu_type="L40S"), "ec2", "g6e.12xlarge"),
        (ResourceConfig(gpu_count=1, gpu_type="T4"), "ec2", "g4dn.xlarge"),
        (ResourceConfig(gpu_count=1), "ec2", "g4dn.xlarge"),
        (ResourceConfig(gpu_count=1, gpu_memory_min_mb=40_000), "sagemaker", "ml.g6e.xlarge"),
        (ResourceConfig(gpu_count=0), "sagemaker", "ml.m5.large"),
        (ResourceConfig(gpu_count=0, cpu_cores=16, ram_min_mb=16_000), "ec2", "c5.4xlarge"),
    ],
)
def test_the_cheapest_fitting_type_is_chosen(resources: ResourceConfig, platform: instances.Platform, expected: str) -> None:
    # Given a resource request / When it is matched against the table
    choice = select_instance(resources, platform)
    # Then the cheapest type that meets every minimum wins, named as the platform names it
    assert choice.instance_type == expected
    assert choice.spec.gpus >= resources.gpu_count


def test_node_count_becomes_the_instance_count_and_storage_the_volume() -> None:
    # Given a four-node H100 job that asks for 500 GB per node
    resources = ResourceConfig(gpu_count=8, gpu_type="H100", node_count=4, storage_min_mb=500 * 1024)
    # When it is matched
    choice = select_instance(resources, "sagemaker")
    # Then it is four instances with a 500 GB volume each and 32 GPUs in all
    assert (choice.instance_count, choice.volume_size_gb, choice.gpus_total) == (4, 500, 32)
    assert choice.hourly_usd > 0


@pytest.mark.parametrize(
    ("resources", "field", "fragment"),
    [
        (ResourceConfig(gpu_count=16, gpu_type="H100"), "resource_config.gpu_count", "16 GPUs per node"),
        (ResourceConfig(gpu_count=8, gpu_type="T4"), "resource_config.gpu_count", "at most 4"),
        (ResourceConfig(gpu_count=1, gpu_type="T4", gpu_memory_min_mb=24_000), "resource_config.gpu_memory_min_mb", "24000 MB"),
        (ResourceConfig(gpu_count=1, gpu_type="A100-80GB", gpu_memory_min_mb=100_000), "resource_config.gpu_memory_min_mb", "100000"),
        (ResourceConfig(gpu_count=1, gpu_type="TPUv5"), "resource_config.gpu_type", "unknown GPU type"),
        (ResourceConfig(gpu_count=0, gpu_type="H100"), "resource_config.gpu_type", "gpu_count 0"),
        (ResourceConfig(gpu_count=1, gpu_type="L4", cpu_cores=500), "resource_config.cpu_cores", "500 vCPUs"),
        (ResourceConfig(gpu_count=0, ram_min_mb=10_000_000), "resource_config.ram_min_mb", "10000000 MB"),
        (ResourceConfig(gpu_count=1, storage_min_mb=20_000_000), "resource_config.storage_min_mb", "storage"),
    ],
)
def test_nothing_fits_is_an_invalid_request_naming_the_field(resources: ResourceConfig, field: str, fragment: str) -> None:
    # Given a request no instance type can satisfy
    # When it is matched on either platform
    for platform in instances.PLATFORMS:
        with pytest.raises(InvalidRequest) as caught:
            select_instance(resources, platform)
        # Then the error names the field that ruled the last candidates out (the API's 422)
        assert caught.value.field == field
        assert fragment in caught.value.message


def test_gpu_names_are_normalised() -> None:
    # Given the spellings users write / When parsed / Then they map to one canonical name and memory floor
    assert parse_gpu_type("H100-80GB") == instances.GpuRequest("H100", 80 * 1024)
    assert parse_gpu_type("a100 40gb").gpu_type == "A100"
    assert parse_gpu_type("NVIDIA-L40S") == instances.GpuRequest("L40S", None)
    assert parse_gpu_type(None) == instances.GpuRequest(None, None)


def test_spec_lookup_accepts_both_spellings_and_validation_skips_local() -> None:
    # Given the two names of one type / Then both find the same row
    assert spec_for("ml.p4d.24xlarge") is spec_for("p4d.24xlarge")
    # And local compute accepts any request, cloud compute checks it
    validate_resources(ResourceConfig(gpu_count=64), "local")
    with pytest.raises(InvalidRequest):
        validate_resources(ResourceConfig(gpu_count=64), "ec2")
