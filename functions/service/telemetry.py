"""GPU telemetry (issue 27.3), the control plane's half: the samples the trainer stored per attempt and
node (schemas/telemetry.py) as per-attempt, per-device series for `GET /jobs/{id}/metrics/system`.

The files are the trainer's (like metrics.jsonl); the same samples also arrive as `system` reports,
from which the lifecycle raises the idle-GPU event (lifecycle.py, `_on_system`).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from functions import constants
from functions.service.ports import ArtifactStore, GpuIdle
from schemas.telemetry import (
    DEFAULT_MAX_SAMPLES,
    IDLE_UTILIZATION_PCT,
    SYSTEM_DIR,
    AttemptSystemMetrics,
    DeviceSample,
    DeviceSeries,
    SystemMetricsResponse,
    SystemSample,
    idle_long_enough,
    parse_system_file_name,
)
from schemas.trainer import TrainerEvent

logger = logging.getLogger(__name__)

_FIELDS = ("utilization_pct", "memory_used_mib", "memory_total_mib", "power_w", "sm_clock_mhz")


def idle_period(event: TrainerEvent) -> GpuIdle | None:
    """The idle period a `system` report completes (every GPU of its node under the threshold for
    IDLE_SECONDS, schemas/telemetry.py), or None: not idle long enough, or not a sample."""
    try:
        sample = SystemSample.model_validate(event.data)
    except ValueError:
        logger.warning("system report %s is not a sample: ignored", event.seq)
        return None
    if not idle_long_enough(sample) or sample.idle_since is None:
        return None
    return GpuIdle(
        attempt=sample.attempt,
        node=sample.node,
        idle_since=sample.idle_since,
        idle_seconds=round(sample.time - sample.idle_since, 1),
        threshold_pct=IDLE_UTILIZATION_PCT,
        devices=tuple((d.index, d.name, d.utilization_pct) for d in sample.devices),
    )


def system_prefix(job_id: str) -> str:
    return f"{constants.job_prefix(job_id)}{SYSTEM_DIR}/"


def system_metrics(store: ArtifactStore, job_id: str, *, max_samples: int = DEFAULT_MAX_SAMPLES) -> SystemMetricsResponse:
    """Every attempt's samples, per device, oldest first; more than `max_samples` of a device are averaged
    in consecutive groups (each group's first time). A torn line (a run killed mid-write) is skipped."""
    series: dict[int, dict[tuple[int, int], DeviceSeries]] = defaultdict(dict)
    unavailable: dict[int, str | None] = {}
    for key in store.list_keys(system_prefix(job_id)):
        ref = parse_system_file_name(key)
        if ref is None:
            continue
        attempt, _node = ref
        series[attempt]  # an attempt with a file is listed, even before its first device sample
        for n, line in enumerate(store.read_lines(key), start=1):
            if not line.strip():
                continue
            try:
                sample = SystemSample.model_validate_json(line)
            except ValueError:
                logger.warning("system line %d of %s is not a sample; skipped", n, key)
                continue
            if not sample.available:
                unavailable.setdefault(attempt, sample.reason)
            for device in sample.devices:
                entry = series[attempt].setdefault(
                    (sample.node, device.index), DeviceSeries(node=sample.node, index=device.index, name=device.name, samples=[])
                )
                entry.samples.append(DeviceSample(time=sample.time, **device.model_dump(include=set(_FIELDS))))
    attempts = []
    for attempt in sorted(series):
        devices = [series[attempt][key] for key in sorted(series[attempt])]
        for one in devices:
            one.samples = _reduced(sorted({s.time: s for s in one.samples}.values(), key=lambda s: s.time), max_samples)
        attempts.append(
            AttemptSystemMetrics(attempt=attempt, available=attempt not in unavailable, reason=unavailable.get(attempt), devices=devices)
        )
    return SystemMetricsResponse(attempts=attempts)


def _reduced(samples: list[DeviceSample], max_samples: int) -> list[DeviceSample]:
    if len(samples) <= max_samples:
        return samples
    size = -(-len(samples) // max_samples)  # ceil: at most max_samples groups
    return [_mean(samples[i : i + size]) for i in range(0, len(samples), size)]


def _mean(group: list[DeviceSample]) -> DeviceSample:
    values: dict[str, float | None] = {}
    for name in _FIELDS:
        known = [v for s in group if (v := getattr(s, name)) is not None]
        values[name] = round(sum(known) / len(known), 2) if known else None
    return DeviceSample(time=group[0].time, **values)
