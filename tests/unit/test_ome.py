"""OME's trainer fields (seeds/002) on a submit request: the `trainer` block folded onto our own fields
(command/args as CUSTOM, numNodes x numProcPerNode, env, resourcesPerNode), dataset compression, and the
refusals that name the field."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from pydantic import ValidationError

from functions.errors import InvalidRequest
from functions.service.compat.ome import apply_ome_trainer
from functions.service.jobs import JobService
from functions.service.principal import Principal
from functions.settings import Settings
from schemas.configs import DataSource, FrameworkType
from schemas.job import SubmitJobRequest
from tests.cloud_fixtures import IMAGE
from tests.fakes import InMemoryArtifactStore, InMemoryJobRepository
from tests.helpers.jobs import ALICE, request_body

# The seed's example trainer block, without its image (tests/unit/test_custom_images.py).
SEED_TRAINER: dict[str, Any] = {
    "command": ["python", "train.py"],
    "args": ["--model", "llama-7b", "--epochs", "10"],
    "numNodes": 4,
    "numProcPerNode": "2",
    "resourcesPerNode": {
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
    },
}


def with_trainer(trainer: dict[str, Any], **overrides: Any) -> SubmitJobRequest:
    body = request_body(**overrides)
    body.pop("resource_config", None)
    return SubmitJobRequest.model_validate(
        {**body, "trainer": trainer, **({"resource_config": overrides["resource_config"]} if "resource_config" in overrides else {})}
    )


def test_the_seeds_trainer_block_becomes_a_custom_multi_node_job() -> None:
    request = apply_ome_trainer(with_trainer(SEED_TRAINER))
    framework, resources = request.training_config.framework, request.resource_config
    assert request.trainer is None
    assert framework.type == FrameworkType.CUSTOM and framework.command == ["python", "train.py"]
    assert framework.args == ["--model", "llama-7b", "--epochs", "10"]
    assert (resources.node_count, resources.gpu_count, resources.cpu_cores, resources.ram_min_mb) == (4, 2, 8, 32 * 1024)
    assert framework.distributed.procs_per_node == 2 and framework.distributed.world_size == 8


def test_num_proc_per_node_gpu_is_one_process_per_gpu_and_env_is_the_environment() -> None:
    trainer = {
        "command": ["python", "-m", "torch.distributed.launch", "train.py"],
        "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}],
        "numNodes": 2,
        "numProcPerNode": "gpu",
        "resourcesPerNode": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}},
    }
    request = apply_ome_trainer(with_trainer(trainer))
    assert request.training_config.framework.distributed.world_size == 4
    assert request.training_config.environment == {"CUDA_VISIBLE_DEVICES": "0,1"}


@pytest.mark.parametrize(
    ("trainer", "overrides", "field", "words"),
    [
        (
            {"image": "ghcr.io/team/a:1"},
            {"training_config": {**request_body()["training_config"], "image": "ghcr.io/team/b:1"}},
            "trainer.image",
            "contradicts training_config.image",
        ),
        ({"numProcPerNode": "auto"}, {}, "trainer.numProcPerNode", "give a number of processes or 'gpu'"),
        (
            {"numNodes": 4},
            {"resource_config": {"gpu_count": 0, "node_count": 1}},
            "trainer.numNodes",
            "contradicts resource_config.node_count",
        ),
        ({"args": ["--x"]}, {}, "trainer.args", "needs trainer.command"),
        ({"resourcesPerNode": {"requests": {"memory": "lots"}}}, {}, "trainer.resourcesPerNode.memory", "not a memory quantity"),
        ({"resourcesPerNode": {"requests": {"google.com/tpu": "4"}}}, {}, "trainer.resourcesPerNode.google.com/tpu", "not a resource"),
        (
            {"env": [{"name": "A", "value": "1"}]},
            {"training_config": {**request_body()["training_config"], "environment": {"A": "2"}}},
            "trainer.env.A",
            "contradicts",
        ),
    ],
)
def test_what_cannot_be_mapped_is_refused_naming_the_field(
    trainer: dict[str, Any], overrides: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        apply_ome_trainer(with_trainer(trainer, **overrides))
    assert caught.value.field == field and words in caught.value.message


def test_command_against_another_framework_is_refused() -> None:
    body = request_body()
    body["training_config"]["framework"] = {"type": "FSDP"}
    with pytest.raises(InvalidRequest, match="runs as framework CUSTOM"):
        apply_ome_trainer(SubmitJobRequest.model_validate({**body, "trainer": {"command": ["python", "x.py"]}}))


def test_procs_per_node_and_an_explicit_world_size_must_agree() -> None:
    body = request_body(resource_config={"gpu_count": 2, "node_count": 2})
    body["training_config"]["framework"] = {"type": "FSDP", "distributed": {"procs_per_node": "gpu", "world_size": 3}}
    with pytest.raises(ValidationError, match="contradicts procs_per_node x node_count = 4"):
        SubmitJobRequest.model_validate(body)
    body["training_config"]["framework"]["distributed"]["world_size"] = 4
    assert SubmitJobRequest.model_validate(body).training_config.framework.distributed.world_size == 4


def test_dataset_compression_is_the_format_ome_names_it_by() -> None:
    assert DataSource(path="s3://b/d", format="jsonl", compression="gzip").format == "jsonl.gz"
    assert DataSource(path="s3://b/d", compression="none").format == "jsonl"
    with pytest.raises(ValidationError, match="contradicts compression"):
        DataSource(path="s3://b/d", format="jsonl.gz", compression="none")


def test_submit_folds_the_block_in_and_a_training_shapes_nodes_scale_the_processes() -> None:
    counter = itertools.count(1)
    shapes = json.dumps(
        [
            {
                "name": "a10g-4x2",
                "accelerator_type": "A10G",
                "accelerator_count": 4,
                "node_count": 2,
                "instance_types": {"sagemaker": "ml.g5.12xlarge"},
            }
        ]
    )
    service = JobService(
        InMemoryJobRepository(),
        InMemoryArtifactStore(),
        None,
        Settings(training_shapes=shapes, compute="sagemaker", trainer_image_uri=IMAGE),  # 2 nodes: not compute 'local'
        ids=lambda: f"job-{next(counter)}",
    )
    body = request_body(resource_config={"training_shape": "a10g-4x2"})
    job = service.submit(
        SubmitJobRequest.model_validate({**body, "trainer": {"command": ["python", "train.py"], "numProcPerNode": "gpu"}}), Principal(ALICE)
    )
    assert job.training_config.framework.type == FrameworkType.CUSTOM
    assert job.training_config.framework.distributed.world_size == 8  # 2 nodes x 4 GPUs
    assert "trainer" not in job.model_dump()


def test_a_commands_script_is_confined_like_a_custom_script_path() -> None:
    # Given a deployment that lets jobs name no local file  When a CUSTOM command names one
    counter = itertools.count(1)
    service = JobService(InMemoryJobRepository(), InMemoryArtifactStore(), None, Settings(), ids=lambda: f"job-{next(counter)}")
    body = request_body()
    trainer = {"command": ["python", "/home/bob/private/train.py"], "args": ["--x", "/not/checked/as/a/path"]}
    # Then it is refused naming the command's element; a bare interpreter name is no path
    with pytest.raises(InvalidRequest) as caught:
        service.submit(SubmitJobRequest.model_validate({**body, "trainer": trainer}), Principal(ALICE))
    assert caught.value.field == "training_config.framework.command[1]"


def test_a_custom_jobs_hyperparameters_are_its_scripts_own() -> None:
    # A CUSTOM job's hyperparameters go to its script as --key value: not checked as our trainer's
    body = request_body()
    body["training_config"]["framework"] = {"type": "CUSTOM", "command": ["python", "train.py"]}
    body["training_config"]["hyperparameters"] = {"my_own_knob": "x"}
    assert SubmitJobRequest.model_validate(body).training_config.hyperparameters == {"my_own_knob": "x"}
    # Our trainer's jobs still have theirs checked
    body["training_config"]["framework"] = {"type": "HF_TRAINER"}
    with pytest.raises(ValidationError, match="unknown hyperparameter"):
        SubmitJobRequest.model_validate(body)
