"""OME's `trainer` block (schemas/ome.py) onto the submit request's own fields, at submit.

| trainer                          | the job                                                           |
|----------------------------------|-------------------------------------------------------------------|
| command, args                    | framework.type CUSTOM, framework.command, framework.args          |
| args (a CUSTOM script job)       | framework.args                                                    |
| env [{name, value}]              | training_config.environment                                       |
| numNodes                         | resource_config.node_count                                        |
| numProcPerNode (n, "n", "gpu")   | framework.distributed.procs_per_node (world_size = nodes x it)    |
| resourcesPerNode requests/limits | gpu_count (nvidia.com/gpu), cpu_cores (cpu), ram_min_mb (memory)  |
| image                            | training_config.image (SageMaker/EC2, allowed repositories only)  |

A field given both ways with different values is a 422 naming both.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from functions.errors import InvalidRequest
from schemas.configs import FrameworkType
from schemas.job import SubmitJobRequest
from schemas.ome import OmeTrainer

_QUANTITY = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>[A-Za-z]*)$")
# Kubernetes quantities -> MiB (binary suffixes exact, decimal ones converted).
_MEMORY_MIB = {
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024**2,
    "K": 1000 / 1024**2,
    "M": 1000**2 / 1024**2,
    "G": 1000**3 / 1024**2,
    "T": 1000**4 / 1024**2,
    "": 1 / 1024**2,
}


def apply_ome_trainer(request: SubmitJobRequest) -> SubmitJobRequest:
    """The request with its `trainer` block folded into its own fields (and the block dropped)."""
    trainer = request.trainer
    if trainer is None:
        return request
    body = request.model_dump(mode="json", exclude_unset=True, exclude={"trainer"}, context={"reveal_secrets": True})
    tc = body.setdefault("training_config", {})
    framework = tc.setdefault("framework", {})
    resources = body.setdefault("resource_config", {})
    if trainer.image:
        _put(tc, "image", trainer.image, "trainer.image", "training_config.image")  # where it may run: JobService
    if trainer.command:
        if framework.get("type", FrameworkType.CUSTOM.value) != FrameworkType.CUSTOM.value:
            raise InvalidRequest("trainer.command", f"runs as framework CUSTOM; training_config.framework.type is {framework['type']}")
        _put(framework, "type", FrameworkType.CUSTOM.value, "trainer.command", "training_config.framework.type")
        _put(framework, "command", list(trainer.command), "trainer.command", "training_config.framework.command")
    if trainer.args:
        if framework.get("type") != FrameworkType.CUSTOM.value:
            raise InvalidRequest("trainer.args", "needs trainer.command, or a CUSTOM framework with custom_script_path")
        _put(framework, "args", list(trainer.args), "trainer.args", "training_config.framework.args")
    environment = tc.setdefault("environment", {})
    for var in trainer.env:
        _put(environment, var.name, var.value, f"trainer.env.{var.name}", f"training_config.environment.{var.name}")
    if trainer.num_nodes is not None:
        _put(resources, "node_count", trainer.num_nodes, "trainer.numNodes", "resource_config.node_count")
    if trainer.num_proc_per_node is not None:
        distributed = framework.setdefault("distributed", {})
        _put(
            distributed, "procs_per_node", _procs(trainer), "trainer.numProcPerNode", "training_config.framework.distributed.procs_per_node"
        )
    if trainer.resources_per_node is not None:
        _resources(trainer, resources)
    try:
        return SubmitJobRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "trainer"
        raise InvalidRequest(where, str(first.get("msg", exc)).removeprefix("Value error, ")) from exc


def _put(section: dict[str, Any], key: str, value: Any, ome_field: str, own_field: str) -> None:
    if key in section and section[key] != value:
        raise InvalidRequest(ome_field, f"{value!r} contradicts {own_field} {section[key]!r}; give it once")
    section[key] = value


def _procs(trainer: OmeTrainer) -> int | str:
    raw = trainer.num_proc_per_node
    if isinstance(raw, int):
        return raw
    text = str(raw).strip().lower()
    if text == "gpu":
        return "gpu"
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise InvalidRequest("trainer.numProcPerNode", f"{raw!r} is not supported: give a number of processes or 'gpu' (one per GPU)")


def _resources(trainer: OmeTrainer, resources: dict[str, Any]) -> None:
    assert trainer.resources_per_node is not None
    given = {**trainer.resources_per_node.limits, **trainer.resources_per_node.requests}  # requests rule, as for the scheduler
    for name, raw in given.items():
        where = f"trainer.resourcesPerNode.{name}"
        if name == "nvidia.com/gpu":
            _put(resources, "gpu_count", _whole(raw, where), where, "resource_config.gpu_count")
        elif name == "cpu":
            _put(resources, "cpu_cores", _cpu(raw, where), where, "resource_config.cpu_cores")
        elif name == "memory":
            _put(resources, "ram_min_mb", _memory_mib(raw, where), where, "resource_config.ram_min_mb")
        else:
            raise InvalidRequest(where, "not a resource trainplane places (known: nvidia.com/gpu, cpu, memory)")


def _whole(raw: str | int, where: str) -> int:
    text = str(raw).strip()
    if not text.isdigit():
        raise InvalidRequest(where, f"{raw!r} is not a whole number")
    return int(text)


def _cpu(raw: str | int, where: str) -> int:
    text = str(raw).strip()
    if text.endswith("m") and text[:-1].isdigit():
        return max(1, math.ceil(int(text[:-1]) / 1000))  # millicores, rounded up to whole cores
    try:
        return max(1, math.ceil(float(text)))
    except ValueError:
        raise InvalidRequest(where, f"{raw!r} is not a CPU quantity (e.g. 8 or 500m)") from None


def _memory_mib(raw: str | int, where: str) -> int:
    match = _QUANTITY.match(str(raw).strip())
    if match is None or match.group("unit") not in _MEMORY_MIB:
        raise InvalidRequest(where, f"{raw!r} is not a memory quantity (e.g. 32Gi, 512Mi, 16G)")
    return max(1, math.ceil(float(match.group("number")) * _MEMORY_MIB[match.group("unit")]))
