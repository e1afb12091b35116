"""GPU telemetry (issue 27.3), the control plane's half: `system` reports of a running job whose GPUs stay
under 20% for 15 minutes raise one `Trainplane Job GPUs Idle` event per idle period (fakes; the DynamoDB
write and its race: tests/integration/test_gpu_idle_event.py)."""

from __future__ import annotations

from typing import Any

from functions.service import telemetry
from schemas.telemetry import IDLE_SECONDS
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.unit.test_statemachine_tasks import World

T0 = 1_767_225_600.0


def _system(at: float, idle_since: float | None, utils: list[float], *, attempt: int = 1, node: int = 0) -> TrainerEvent:
    devices: list[dict[str, Any]] = [{"index": i, "name": "NVIDIA H100", "utilization_pct": u} for i, u in enumerate(utils)]
    data = {"time": at, "attempt": attempt, "node": node, "available": True, "devices": devices, "idle_since": idle_since}
    return TrainerEvent(kind=TrainerEventKind.SYSTEM, time=at, data=data, job_id=None, attempt=attempt)


def test_fifteen_idle_minutes_raise_one_event_per_idle_period() -> None:
    # Given a training job
    w = World()
    job = w.submit(max_steps=4)
    w.to_training(job.job_id)

    # When its node reports idle GPUs for 14 minutes 50 s, then 15 minutes, then again (a repeat, a later sample)
    for seconds in (0, 600, IDLE_SECONDS - 10):
        w.svc.on_trainer_event(job.job_id, 1, _system(T0 + seconds, T0, [3.0, 19.0]))
    assert w.repo.gpu_idle == []
    for seconds in (IDLE_SECONDS, IDLE_SECONDS, IDLE_SECONDS + 10):
        w.svc.on_trainer_event(job.job_id, 1, _system(T0 + seconds, T0, [3.0, 19.0]))

    # Then one event for the period, naming the attempt, node, start, length and devices
    ((job_id, idle),) = w.repo.gpu_idle
    assert job_id == job.job_id and (idle.attempt, idle.node, idle.idle_since, idle.idle_seconds) == (1, 0, T0, IDLE_SECONDS)
    assert idle.threshold_pct == 20.0 and idle.devices == ((0, "NVIDIA H100", 3.0), (1, "NVIDIA H100", 19.0))
    # And after the GPUs worked again, a new idle period of 15 minutes is a second event
    later = T0 + 2 * IDLE_SECONDS
    w.svc.on_trainer_event(job.job_id, 1, _system(later + IDLE_SECONDS, later, [0.0, 0.0]))
    assert [i.idle_since for _, i in w.repo.gpu_idle] == [T0, later]


def test_busy_gpus_another_attempts_reports_and_malformed_reports_raise_nothing() -> None:
    w = World()
    job = w.submit(max_steps=4)
    w.to_training(job.job_id)
    # a busy device (at the threshold), no idle_since, an old attempt's report, a malformed report
    w.svc.on_trainer_event(job.job_id, 1, _system(T0 + IDLE_SECONDS, T0, [20.0, 1.0]))
    w.svc.on_trainer_event(job.job_id, 1, _system(T0 + IDLE_SECONDS, None, [1.0]))
    w.svc.on_trainer_event(job.job_id, 2, _system(T0 + IDLE_SECONDS, T0, [1.0], attempt=2))
    w.svc.on_trainer_event(job.job_id, 1, TrainerEvent(kind=TrainerEventKind.SYSTEM, time=0.0, data={"time": "soon"}))
    assert w.repo.gpu_idle == []
    # a sample without NVML is never idle
    none = TrainerEvent(kind=TrainerEventKind.SYSTEM, time=0.0, data={"time": T0, "attempt": 1, "available": False, "idle_since": T0 - 1e4})
    assert telemetry.idle_period(none) is None
