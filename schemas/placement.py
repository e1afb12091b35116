"""Capacity-aware placement (docs/PLACEMENT.md): the candidates a job accepts, and what happened to them.

`resource_config.placement` lists up to 10 ordered candidates (GPU type, GPUs per node, nodes, platform,
purchase option) plus a deadline or a longest wait and the availability zones allowed. The control plane
picks the first healthy candidate for each attempt (functions/service/placement.py), adapts per-device
batch and gradient accumulation so the global batch stays the same, and records every placement tried on
the job (`Job.placement`).

Below schemas/configs.py (which imports it): this module imports nothing of ours.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_CANDIDATES = 10
MAX_ZONES = 32
# A zone as AWS spells it: us-east-1a, eu-central-1b, us-west-2-lax-1a (local zones).
ZONE_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d([a-z]|-[a-z0-9-]+)$"


class Purchase(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"


class PlacementCandidate(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    gpu_type: str = Field(min_length=1, max_length=32, description="e.g. H100, A100-80GB, L40S (resource_config.gpu_type's grammar).")
    gpus_per_node: int = Field(default=1, ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=256)
    platform: Literal["sagemaker", "ec2"] = "ec2"
    purchase: Purchase = Purchase.SPOT

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    def label(self) -> str:
        return f"{self.platform}/{self.gpu_type}x{self.gpus_per_node}x{self.nodes}/{self.purchase.value}"


class PlacementConfig(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    candidates: list[PlacementCandidate] = Field(
        min_length=1, max_length=MAX_CANDIDATES, description="Ordered: the first healthy one is used for each attempt."
    )
    deadline: datetime | None = Field(
        default=None, description="When training must be done: spot while there is slack, then on-demand (docs/PLACEMENT.md)."
    )
    max_wait_seconds: int | None = Field(
        default=None, ge=60, le=28 * 24 * 3600, description="How long the job may wait for a first placement before it fails."
    )
    availability_zones: list[str] = Field(
        default_factory=list, max_length=MAX_ZONES, description="Zones a placement may use; empty = every zone of the region."
    )
    expected_work_seconds: int | None = Field(
        default=None,
        ge=60,
        le=28 * 24 * 3600,
        description="Training time on the first candidate, for the deadline check before the trainer has measured its rate.",
    )

    @model_validator(mode="after")
    def _zones_and_deadline(self) -> PlacementConfig:
        import re

        for i, zone in enumerate(self.availability_zones):
            if not re.match(ZONE_PATTERN, zone):
                raise ValueError(f"availability_zones[{i}]: {zone!r} is not an availability zone name (e.g. us-east-1a)")
        if len(set(self.availability_zones)) != len(self.availability_zones):
            raise ValueError("availability_zones: a zone is listed twice")
        if self.deadline is not None and self.max_wait_seconds is not None:
            raise ValueError("give deadline or max_wait_seconds, not both")
        if self.deadline is not None and self.deadline.tzinfo is None:
            raise ValueError("deadline: give a time zone (e.g. 2026-11-27T08:00:00Z)")
        return self


class Adaptation(BaseModel):
    """How the trainer runs on one candidate so that the global batch stays the same."""

    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)

    candidate: int
    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    global_batch_size: int


class PlacementTry(BaseModel):
    """One attempt's placement: the pool it went to and how it ended."""

    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)

    attempt: int
    candidate: int
    pool: str = Field(description="platform/instance_type/zone/purchase")
    instance_type: str
    purchase: Purchase
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = Field(default=None, description="running, completed, capacity, preempted, stopped, failed")
    reason: str | None = None
    work_lost_steps: int | None = Field(default=None, description="Steps since the last checkpoint, lost to a preemption.")
    hourly_usd: float = 0.0
    instance_preferences: list[str] = Field(
        default_factory=list,
        description="SageMaker on-demand: the instance types offered in order (InstancePreferences); SageMaker picks one.",
    )
    fleet_pools: list[str] = Field(
        default_factory=list,
        description="EC2: the pools of the attempt's one instant EC2 Fleet, in order; EC2 picks one (the try's pool is then that one).",
    )


class Recovery(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)
    preempted_at: datetime
    training_at: datetime | None = None
    seconds: float | None = None


class PlacementRecord(BaseModel):
    """What happened to a job's placement (GET /jobs/{id}: `placement`; `trainplane placement JOB`)."""

    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)

    tries: list[PlacementTry] = Field(default_factory=list)
    pools_blocked: list[str] = Field(default_factory=list)
    adaptations: list[Adaptation] = Field(default_factory=list)
    time_to_first_step_seconds: float | None = None
    recoveries: list[Recovery] = Field(default_factory=list)
    dollars_saved_usd: float = Field(default=0.0, description="Against running every attempt on the first on-demand candidate.")
    at_risk: str | None = Field(default=None, description="Why the deadline may be missed, when it may.")
    moved_to_on_demand: bool = False
