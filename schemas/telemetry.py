"""GPU telemetry (issue 27.3): what the trainer samples from NVML, where it keeps it, what the API serves.

The trainer's local rank 0 of every node samples its node's GPUs every SAMPLE_SECONDS; each sample is a
`system` report (TrainerEventKind.SYSTEM, the channel of every report) and a line of the attempt's and
node's file beside metrics.jsonl (`jobs/<id>/system/<attempt:03d>-<node:03d>.jsonl`), which
`GET /jobs/{id}/metrics/system` reads. A job whose GPUs all stay under IDLE_UTILIZATION_PCT for
IDLE_SECONDS raises `Trainplane Job GPUs Idle` (docs/EVENTS.md).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from schemas.bounds import DEFAULT_MAX_SAMPLES as DEFAULT_MAX_SAMPLES

SAMPLE_SECONDS = 10.0
IDLE_UTILIZATION_PCT = 20.0
IDLE_SECONDS = 15 * 60
SYSTEM_DIR = "system"  # beside metrics.jsonl
_FILE = re.compile(r"^(?P<attempt>\d{3,})-(?P<node>\d{3,})\.jsonl$")


class DeviceReading(BaseModel):
    """One GPU at one instant. None: NVML did not answer that field for this device (e.g. no power sensor)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")
    index: int = Field(ge=0, description="The device's NVML index on its node.")
    name: str | None = None
    utilization_pct: float | None = Field(default=None, description="GPU (SM) busy time over the last sample period, percent.")
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None


class SystemSample(BaseModel):
    """One sample of one node's GPUs: a line of the system file and the data of a `system` report."""

    model_config = ConfigDict(defer_build=True, extra="forbid")
    time: float = Field(description="Epoch seconds.")
    attempt: int = Field(ge=1)
    node: int = Field(default=0, ge=0)
    available: bool = Field(description="False: no NVML on this host (no GPU, no driver); `devices` is empty.")
    reason: str | None = Field(default=None, description="Why NVML is not available.")
    devices: list[DeviceReading] = Field(default_factory=list)
    idle_since: float | None = Field(
        default=None, description="Since when every device of this node has been under IDLE_UTILIZATION_PCT, without a break."
    )


def is_idle(sample: SystemSample) -> bool:
    """Every device reports a utilization, and every one is under the threshold."""
    readings = [d.utilization_pct for d in sample.devices]
    return bool(readings) and all(u is not None and u < IDLE_UTILIZATION_PCT for u in readings)


def idle_long_enough(sample: SystemSample) -> bool:
    """The node's GPUs have been idle for IDLE_SECONDS as of this sample."""
    return is_idle(sample) and sample.idle_since is not None and sample.time - sample.idle_since >= IDLE_SECONDS


def system_file_name(attempt: int, node: int) -> str:
    return f"{attempt:03d}-{node:03d}.jsonl"


def parse_system_file_name(name: str) -> tuple[int, int] | None:
    """(attempt, node) of a system file's name; None for anything else."""
    match = _FILE.match(name.rsplit("/", 1)[-1])
    return (int(match.group("attempt")), int(match.group("node"))) if match else None


def system_file_uri(metrics_uri: str, attempt: int, node: int) -> str:
    """The system file beside metrics.jsonl (a local path or an s3:// URI)."""
    return f"{metrics_uri.rstrip('/').rsplit('/', 1)[0]}/{SYSTEM_DIR}/{system_file_name(attempt, node)}"


# --- GET /jobs/{id}/metrics/system --------------------------------------------------------------


class DeviceSample(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)
    time: float = Field(description="Epoch seconds.")
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None


class DeviceSeries(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)
    node: int
    index: int
    name: str | None = None
    samples: list[DeviceSample] = Field(description="Oldest first.")


class AttemptSystemMetrics(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: cold start (tests/unit/test_cold_start.py)
    attempt: int
    available: bool = Field(description="False: the trainer had no NVML (no GPU or no driver) on at least one node of this attempt.")
    reason: str | None = Field(default=None, description="Why NVML was not available.")
    devices: list[DeviceSeries] = Field(default_factory=list, description="By node, then device index.")


class SystemMetricsResponse(BaseModel):
    """The job's GPU samples per attempt and device; `attempts` empty: no sample reported yet."""

    model_config = ConfigDict(defer_build=True)
    sample_seconds: float = SAMPLE_SECONDS
    attempts: list[AttemptSystemMetrics]
