"""The one table from a job's resource_config to an AWS instance type, for SageMaker and for EC2.

Every launcher, the submit-time check and the cost estimate read this table; nothing else knows an
instance type. A request that no row can satisfy is an InvalidRequest naming the resource_config
field that ruled the last candidates out, so the API answers 422 before a job ever queues.

Prices live beside the table in pricing.py (keyed by the same names).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from functions.catalog import pricing
from functions.errors import InvalidRequest
from schemas.configs import ResourceConfig
from schemas.shapes import TrainingShapeProfile

Platform = Literal["sagemaker", "ec2"]
PLATFORMS: tuple[Platform, ...] = ("sagemaker", "ec2")

GIB = 1024  # MiB per GiB: the table speaks AWS's GiB, resource_config speaks MB (read as MiB).

# SageMaker's ResourceConfig.VolumeSizeInGB bounds; EC2's gp3 root volumes go to 16 TiB as well.
MIN_VOLUME_GB = 30
MAX_VOLUME_GB = 16_384


@dataclass(frozen=True)
class InstanceSpec:
    """One instance type as AWS lists it (per node). `name` has no `ml.` prefix."""

    name: str
    gpu_type: str | None  # canonical GPU name; None for CPU-only types
    gpus: int
    gpu_memory_mb: int  # per GPU
    vcpus: int
    ram_mb: int
    local_storage: bool = False  # local NVMe instance storage (SageMaker then refuses VolumeKmsKeyId)
    sagemaker: bool = True  # offered as ml.<name> for SageMaker training
    ec2: bool = True

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def capabilities(self) -> frozenset[str]:
        """The instance features scheduling_config.required_capabilities may ask for (CAPABILITIES)."""
        found = set()
        if self.local_storage:
            found.add("local-nvme")
        if self.gpu_type in _FP8_GPUS:
            found.add("fp8")
        if self.family in _NVLINK_FAMILIES:
            found.add("nvlink")
        if self.family in _EFA_FAMILIES or (self.gpus > 0 and self.vcpus >= 32 and self.family in _EFA_LARGE_FAMILIES):
            found.add("efa")
        return frozenset(found)

    @property
    def gpu_throughput(self) -> float:
        """Relative training throughput of one of its GPUs (GPU_THROUGHPUT; 0 for CPU-only types)."""
        return GPU_THROUGHPUT.get(self.gpu_type or "", 0.0)

    def offered_on(self, platform: Platform) -> bool:
        return self.sagemaker if platform == "sagemaker" else self.ec2

    def type_name(self, platform: Platform) -> str:
        return f"ml.{self.name}" if platform == "sagemaker" else self.name


# Relative training throughput of one GPU, A100 = 1.0: a planning figure for mixed-precision transformer
# training (dense BF16/FP16 tensor-core peak, tempered by memory bandwidth: H100 SXM 989 TFLOPS and 3.35 TB/s
# against A100's 312 and 1.6-2.0; L40S 362 at 0.86 TB/s; A10G, L4, T4 far below), not a benchmark of one model.
# Placement converts the work left between candidates with it (the deadline policy, scripts/sim_placement.py).
GPU_THROUGHPUT: dict[str, float] = {"H100": 2.5, "A100": 1.0, "L40S": 0.6, "A10G": 0.3, "L4": 0.25, "T4": 0.12}

# Instance features (AWS instance type pages): FP8 tensor cores on Hopper and Ada GPUs; NVLink/NVSwitch
# between the GPUs of P5 and P4; EFA on P5/P4 and on the G-family sizes of 8xlarge and up.
CAPABILITIES = ("efa", "nvlink", "local-nvme", "fp8")
_FP8_GPUS = frozenset({"H100", "L40S", "L4"})
_NVLINK_FAMILIES = frozenset({"p5", "p4d", "p4de"})
_EFA_FAMILIES = frozenset({"p5", "p4d", "p4de"})
_EFA_LARGE_FAMILIES = frozenset({"g6e", "g6", "g5", "g4dn"})


def _gpu(name: str, gpu: str, gpus: int, gpu_gib: int, vcpus: int, ram_gib: int, *, sagemaker: bool = True) -> InstanceSpec:
    # Every GPU family in the table (P5, P4, G6e, G6, G5, G4dn) carries local NVMe storage.
    return InstanceSpec(name, gpu, gpus, gpu_gib * GIB, vcpus, ram_gib * GIB, local_storage=True, sagemaker=sagemaker)


def _cpu(name: str, vcpus: int, ram_gib: int) -> InstanceSpec:
    return InstanceSpec(name, None, 0, 0, vcpus, ram_gib * GIB)


# Specs from the AWS instance type pages (accelerated computing: P5, P4, G6e, G6, G5, G4dn).
INSTANCE_TYPES: tuple[InstanceSpec, ...] = (
    # H100 80 GB
    _gpu("p5.48xlarge", "H100", 8, 80, 192, 2048),
    # A100: p4de carries the 80 GB part, p4d the 40 GB one
    _gpu("p4de.24xlarge", "A100", 8, 80, 96, 1152),
    _gpu("p4d.24xlarge", "A100", 8, 40, 96, 1152),
    # L40S 48 GB
    _gpu("g6e.xlarge", "L40S", 1, 48, 4, 32),
    _gpu("g6e.2xlarge", "L40S", 1, 48, 8, 64),
    _gpu("g6e.4xlarge", "L40S", 1, 48, 16, 128),
    _gpu("g6e.8xlarge", "L40S", 1, 48, 32, 256),
    _gpu("g6e.16xlarge", "L40S", 1, 48, 64, 512),
    _gpu("g6e.12xlarge", "L40S", 4, 48, 48, 384),
    _gpu("g6e.24xlarge", "L40S", 4, 48, 96, 768),
    _gpu("g6e.48xlarge", "L40S", 8, 48, 192, 1536),
    # L4 24 GB
    _gpu("g6.xlarge", "L4", 1, 24, 4, 16),
    _gpu("g6.2xlarge", "L4", 1, 24, 8, 32),
    _gpu("g6.4xlarge", "L4", 1, 24, 16, 64),
    _gpu("g6.8xlarge", "L4", 1, 24, 32, 128),
    _gpu("g6.16xlarge", "L4", 1, 24, 64, 256),
    _gpu("g6.12xlarge", "L4", 4, 24, 48, 192),
    _gpu("g6.24xlarge", "L4", 4, 24, 96, 384),
    _gpu("g6.48xlarge", "L4", 8, 24, 192, 768),
    # A10G 24 GB
    _gpu("g5.xlarge", "A10G", 1, 24, 4, 16),
    _gpu("g5.2xlarge", "A10G", 1, 24, 8, 32),
    _gpu("g5.4xlarge", "A10G", 1, 24, 16, 64),
    _gpu("g5.8xlarge", "A10G", 1, 24, 32, 128),
    _gpu("g5.16xlarge", "A10G", 1, 24, 64, 256),
    _gpu("g5.12xlarge", "A10G", 4, 24, 48, 192),
    _gpu("g5.24xlarge", "A10G", 4, 24, 96, 384),
    _gpu("g5.48xlarge", "A10G", 8, 24, 192, 768),
    # T4 16 GB
    _gpu("g4dn.xlarge", "T4", 1, 16, 4, 16),
    _gpu("g4dn.2xlarge", "T4", 1, 16, 8, 32),
    _gpu("g4dn.4xlarge", "T4", 1, 16, 16, 64),
    _gpu("g4dn.8xlarge", "T4", 1, 16, 32, 128),
    _gpu("g4dn.16xlarge", "T4", 1, 16, 64, 256),
    _gpu("g4dn.12xlarge", "T4", 4, 16, 48, 192),
    # CPU only (gpu_count 0): general purpose and compute optimised
    _cpu("m5.large", 2, 8),
    _cpu("m5.xlarge", 4, 16),
    _cpu("m5.2xlarge", 8, 32),
    _cpu("m5.4xlarge", 16, 64),
    _cpu("m5.12xlarge", 48, 192),
    _cpu("m5.24xlarge", 96, 384),
    _cpu("c5.xlarge", 4, 8),
    _cpu("c5.2xlarge", 8, 16),
    _cpu("c5.4xlarge", 16, 32),
    _cpu("c5.9xlarge", 36, 72),
    _cpu("c5.18xlarge", 72, 144),
)

_BY_NAME = {spec.name: spec for spec in INSTANCE_TYPES}

# What users write in resource_config.gpu_type -> the canonical name in the table.
GPU_ALIASES: dict[str, str] = {
    "H100": "H100",
    "A100": "A100",
    "L40S": "L40S",
    "L4": "L4",
    "A10G": "A10G",
    "A10": "A10G",
    "T4": "T4",
}
# The memory suffix needs "GB", or a separator then "G": "A10G" is a GPU, not an A10 with 0 GB.
_GPU_PATTERN = re.compile(r"^(?:NVIDIA[\s_-]*)?(?P<model>[A-Z0-9]+?)(?:[\s_-]*(?P<gib>\d+)\s*GB|[\s_-]+(?P<gib2>\d+)\s*G)?$")


@dataclass(frozen=True)
class GpuRequest:
    gpu_type: str | None  # canonical, None = any GPU
    memory_mb: int | None  # from a suffix such as A100-80GB


@dataclass(frozen=True)
class InstanceChoice:
    spec: InstanceSpec
    platform: Platform
    instance_count: int
    volume_size_gb: int

    @property
    def instance_type(self) -> str:
        return self.spec.type_name(self.platform)

    @property
    def hourly_usd(self) -> float:
        """On-demand price of one instance."""
        return pricing.on_demand_hourly(self.spec.name, self.platform)

    @property
    def gpus_total(self) -> int:
        return self.spec.gpus * self.instance_count


def spec_for(instance_type: str) -> InstanceSpec:
    """The table row for `g5.xlarge` or `ml.g5.xlarge`; KeyError for anything else."""
    return _BY_NAME[instance_type.removeprefix("ml.")]


def parse_gpu_type(raw: str | None) -> GpuRequest:
    """`H100`, `A100-80GB`, `nvidia a10g`, `L40S` ... -> canonical name and optional memory floor."""
    if raw is None or not raw.strip():
        return GpuRequest(None, None)
    match = _GPU_PATTERN.match(raw.strip().upper())
    canonical = GPU_ALIASES.get(match.group("model")) if match else None
    if match is None or canonical is None:
        known = ", ".join(sorted(set(GPU_ALIASES.values())))
        hint = "optionally with a memory size, e.g. A100-80GB"
        raise InvalidRequest("resource_config.gpu_type", f"unknown GPU type {raw!r}; known types: {known} ({hint})")
    gib = match.group("gib") or match.group("gib2")
    return GpuRequest(canonical, int(gib) * GIB if gib else None)


def select_instance(resources: ResourceConfig, platform: Platform, shape: TrainingShapeProfile | None = None) -> InstanceChoice:
    """The cheapest instance type on `platform` that satisfies every minimum in `resources`.

    gpu_count is per node and an instance may carry more GPUs than asked when no smaller one exists
    (2 x A10G -> g5.12xlarge with 4); node_count becomes the instance count. A training shape that
    names an instance type for `platform` pins it (the minimums are still checked against it).
    """
    gpu = parse_gpu_type(resources.gpu_type)
    if resources.gpu_count == 0 and gpu.gpu_type is not None:
        raise InvalidRequest(
            "resource_config.gpu_type", f"gpu_type {resources.gpu_type!r} was given with gpu_count 0; set gpu_count >= 1 or drop gpu_type"
        )
    pinned = shape.instance_types.get(platform) if shape is not None else None
    candidates: list[InstanceSpec] = [spec_for(pinned)] if pinned else [s for s in INSTANCE_TYPES if s.offered_on(platform)]
    memory_floor = max(resources.gpu_memory_min_mb or 0, gpu.memory_mb or 0)
    steps: list[tuple[str, Callable[[InstanceSpec], bool], str]] = [
        (
            "resource_config.gpu_type",
            lambda s: (s.gpus == 0) if resources.gpu_count == 0 else (s.gpus > 0 and gpu.gpu_type in (None, s.gpu_type)),
            f"no {platform} instance type carries {gpu.gpu_type or 'a'} GPU" if resources.gpu_count else f"no CPU-only {platform} type",
        ),
        (
            "resource_config.gpu_count",
            lambda s: s.gpus >= resources.gpu_count,
            f"no {platform} {_describe_gpu(gpu)} instance type has {resources.gpu_count} GPUs per node "
            f"(at most {_most(candidates, lambda s: s.gpus, gpu)}); use node_count for more nodes",
        ),
        (
            "resource_config.gpu_memory_min_mb",
            lambda s: s.gpus == 0 or s.gpu_memory_mb >= memory_floor,
            f"no {platform} {_describe_gpu(gpu)} instance type has {memory_floor} MB of memory per GPU",
        ),
        (
            "resource_config.cpu_cores",
            lambda s: s.vcpus >= (resources.cpu_cores or 0),
            f"no {platform} instance type that fits the GPU request has {resources.cpu_cores} vCPUs",
        ),
        (
            "resource_config.ram_min_mb",
            lambda s: s.ram_mb >= (resources.ram_min_mb or 0),
            f"no {platform} instance type that fits the request above has {resources.ram_min_mb} MB of memory",
        ),
    ]
    for field, keep, why in steps:
        remaining = [s for s in candidates if keep(s)]
        if not remaining:
            raise InvalidRequest(field, f"nothing fits resource_config: {why}")
        candidates = remaining
    best = min(candidates, key=lambda s: (pricing.on_demand_hourly(s.name, platform), s.gpus, s.name))
    return InstanceChoice(spec=best, platform=platform, instance_count=resources.node_count, volume_size_gb=volume_size_gb(resources))


def volume_size_gb(resources: ResourceConfig) -> int:
    if resources.storage_min_mb is None:
        return MIN_VOLUME_GB
    size = max(MIN_VOLUME_GB, math.ceil(resources.storage_min_mb / GIB))
    if size > MAX_VOLUME_GB:
        limit = MAX_VOLUME_GB * GIB
        raise InvalidRequest("resource_config.storage_min_mb", f"nothing fits resource_config: at most {limit} MB of storage per node")
    return size


def validate_resources(resources: ResourceConfig, compute: str) -> None:
    """Submit-time check: raises the same InvalidRequest a launch would; a no-op for local compute."""
    if compute in PLATFORMS:
        select_instance(resources, compute)


def _describe_gpu(gpu: GpuRequest) -> str:
    return gpu.gpu_type or "GPU"


def _most(specs: Iterable[InstanceSpec], attr: Callable[[InstanceSpec], int], gpu: GpuRequest) -> int:
    values = [attr(s) for s in specs if s.gpus > 0 and gpu.gpu_type in (None, s.gpu_type)]
    return max(values, default=0)
