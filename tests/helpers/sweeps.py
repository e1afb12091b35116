"""Helpers for sweep tests: a sweep body, and fake trials driven through the job table's real transitions."""

from __future__ import annotations

import time
from typing import Any

from functions.service.ports import JobRepository, Transition
from schemas.status import JobStatus
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.helpers.jobs import request_body

S = JobStatus
TO_TRAINING = (S.QUEUED, S.SCHEDULING, S.PREPARING, S.TRAINING)


def sweep_body(**tuning: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "method": "random",
        "maxTrials": 4,
        "metric": {"name": "accuracy", "goal": "maximize"},
        "parameters": {
            "learning_rate": {"type": "double", "min": 0.0001, "max": 0.1, "scale": "log"},
            "warmup_steps": {"type": "int", "min": 1, "max": 4},
        },
        "seed": 7,
    }
    config.update(tuning)
    return {"name": "lr-sweep", "job_template": request_body(), "hyperParameterTuningConfig": config}


def advance(repo: JobRepository, job_id: str, *statuses: JobStatus, reason: str = "test", **changes: Any) -> None:
    for to in statuses:
        job = repo.get(job_id)
        repo.transition(Transition(job_id, job.version, job.status, to, reason, "system", dict(changes) if to == statuses[-1] else {}))


def metric_event(step: int, value: float, name: str = "accuracy") -> TrainerEvent:
    return TrainerEvent(kind=TrainerEventKind.METRICS, time=time.time(), data={"step": step, name: value})


class RecordingWaker:
    def __init__(self) -> None:
        self.woken: list[str] = []

    def wake(self, sweep_id: str) -> None:
        self.woken.append(sweep_id)
