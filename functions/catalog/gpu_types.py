"""The GPU types team quotas are counted in (issue 24), and the price that weighs an hour of each.

A team's quota names a type as users write resource_config.gpu_type (H100, A100-80GB, A100, L40S, L4, A10G,
T4) or `cpu` for gpu_count = 0 jobs; `any` counts the jobs that named no type. An hour of usage is weighted by
the cheapest on-demand EC2 price of one such GPU (instances.py, pricing.py), so that an H100 hour weighs more
in fair share than a T4 hour. A CPU job's unit weighs one cpu instance-hour of the smallest CPU type.
Recorded usage decays with a half-life (`decayed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache

from functions.catalog import pricing
from functions.catalog.instances import GIB, INSTANCE_TYPES, parse_gpu_type
from schemas.configs import ResourceConfig
from schemas.teams import GPU_TYPE_KEYS

CPU = "cpu"
ANY = "any"
GPU_TYPES: tuple[str, ...] = GPU_TYPE_KEYS  # the models validate team quotas against the same names


def gpu_type_of(resources: ResourceConfig) -> str:
    """The quota type a job counts against: `cpu`, `any`, or a type of GPU_TYPES (A100-80GB when an A100
    with at least 80 GB is asked for)."""
    if resources.gpu_count == 0:
        return CPU
    request = parse_gpu_type(resources.gpu_type)
    if request.gpu_type is None:
        return ANY
    if request.gpu_type == "A100" and request.memory_mb is not None and request.memory_mb >= 80 * GIB:
        return "A100-80GB"
    return request.gpu_type


def units_of(resources: ResourceConfig) -> int:
    """The units a job holds while it runs: its GPUs over all nodes, or one per node for a CPU job."""
    return resources.node_count * max(resources.gpu_count, 1)


@cache
def unit_hourly_usd(gpu_type: str) -> float:
    """USD of one unit-hour of `gpu_type`: the cheapest on-demand EC2 price of one such GPU; the average
    over all GPU types for `any`; the smallest CPU type's hour for `cpu`."""
    if gpu_type == CPU:
        return min(pricing.ON_DEMAND_USD[s.name][0] for s in INSTANCE_TYPES if s.gpus == 0)
    if gpu_type == ANY:
        named = [unit_hourly_usd(t) for t in GPU_TYPES if t not in (ANY, CPU)]
        return sum(named) / len(named)
    if gpu_type not in GPU_TYPES:
        raise KeyError(f"unknown GPU type {gpu_type!r}; known: {', '.join(GPU_TYPES)}")
    family, _, memory = gpu_type.partition("-")
    floor = int(memory.removesuffix("GB")) * GIB if memory else 0
    prices = [pricing.ON_DEMAND_USD[s.name][0] / s.gpus for s in INSTANCE_TYPES if s.gpu_type == family and s.gpu_memory_mb >= floor]
    return min(prices)


def decayed(usage: float, since: datetime, now: datetime, half_life_seconds: float) -> float:
    """Usage recorded at `since` as it counts at `now`: u * 2^(-(now - since)/half_life)."""
    elapsed = max((now - since).total_seconds(), 0.0)
    return usage * 2.0 ** (-elapsed / half_life_seconds)


def inventory_problem(inventory: Mapping[str, int], gpu_type: str, units: int) -> tuple[str, str] | None:
    """Why a job asking `units` GPUs of `gpu_type` never fits an emulated inventory: (field, message), or None."""
    kinds = ", ".join(f"{t}={n}" for t, n in inventory.items())
    if gpu_type == "any" and len(inventory) != 1:
        return "resource_config.gpu_type", f"name a GPU type: this machine's emulated GPUs are {kinds}"
    kind = next(iter(inventory)) if gpu_type == "any" else gpu_type
    if kind not in inventory:
        return "resource_config.gpu_type", f"no emulated {gpu_type} GPU on this machine (trainplane up --gpus): it has {kinds}"
    if units > inventory[kind]:
        return "resource_config.gpu_count", f"asks for {units} {kind} GPU(s) but this machine emulates {inventory[kind]}"
    return None
