"""OME's TrainingJob `trainer` block (seeds/002), accepted as is on a submit request (`trainer`).

    "trainer": {"command": ["python", "train.py"], "args": ["--epochs", "10"],
                "env": [{"name": "MODEL_PARALLEL_SIZE", "value": "2"}],
                "numNodes": 2, "numProcPerNode": "gpu",
                "resourcesPerNode": {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}}}

functions/service/compat/ome.py maps it onto the request's own fields at submit (a field given both ways,
differently, is a 422 naming both). `image` becomes training_config.image: it runs on SageMaker or EC2
when the deployment allows its repository (custom_image_repositories), and is refused elsewhere.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from schemas.bounds import MAX_RESOURCE_KEYS, key_count


class OmeEnvVar(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)
    value: str = Field(default="", max_length=32_768)


class OmeResources(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    requests: Annotated[dict[str, str | int], key_count(MAX_RESOURCE_KEYS)] = Field(default_factory=dict, max_length=MAX_RESOURCE_KEYS)
    limits: Annotated[dict[str, str | int], key_count(MAX_RESOURCE_KEYS)] = Field(default_factory=dict, max_length=MAX_RESOURCE_KEYS)


class OmeTrainer(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True, defer_build=True)
    image: str | None = Field(default=None, max_length=512)
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(default=None, min_length=1, max_length=256)
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=1024)
    env: list[OmeEnvVar] = Field(default_factory=list, max_length=200)
    num_nodes: int | None = Field(default=None, alias="numNodes", ge=1, le=256)
    num_proc_per_node: int | str | None = Field(default=None, alias="numProcPerNode", description="An integer (or its string), or 'gpu'.")
    resources_per_node: OmeResources | None = Field(default=None, alias="resourcesPerNode")
