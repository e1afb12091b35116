"""Helpers for sweep tests: a sweep body, and fake trials driven through the job table's real transitions."""

from __future__ import annotations

import time
from typing import Any

from functions.adapters.aws import AwsClients
from functions.adapters.dynamodb import DynamoJobRepository
from functions.adapters.sweeps import DynamoSweepRepository
from functions.service.jobs import JobService
from functions.service.ports import JobRepository, Transition
from functions.service.sweeps.controller import SweepController
from functions.service.sweeps.hooks import SweepHooks
from functions.service.sweeps.service import SweepService
from functions.settings import Settings
from schemas.status import JobStatus
from schemas.sweeps import SweepRequest, TrialState
from schemas.trainer import TrainerEvent, TrainerEventKind
from tests.fakes import InMemoryArtifactStore, RecordingWorkflow
from tests.helpers.jobs import ALICE, request_body

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


class Plane:
    """A sweep plane on moto: real repositories and JobService, a recording workflow and waker."""

    def __init__(self, aws: AwsClients, settings: Settings) -> None:
        self.workflow = RecordingWorkflow()
        self.jobs = JobService(DynamoJobRepository(aws, settings.jobs_table), InMemoryArtifactStore(), self.workflow, settings)
        self.repo = DynamoSweepRepository(aws, settings.jobs_table)
        self.waker = RecordingWaker()
        self.service = SweepService(self.repo, self.jobs, self.waker)
        self.controller = SweepController(self.repo, self.jobs)
        self.hooks = SweepHooks(self.repo, self.waker)
        self.alice = self.jobs.principal(ALICE)

    def create(self, **tuning: Any) -> str:
        return self.service.create(SweepRequest.model_validate(sweep_body(**tuning)), self.alice).sweep_id

    def trials(self, sweep_id: str) -> list[Any]:
        return self.repo.load(sweep_id)[1]

    def running(self, sweep_id: str) -> list[Any]:
        return [t for t in self.trials(sweep_id) if t.state == TrialState.RUNNING]

    def report(self, job_id: str, step: int, value: float) -> None:
        self.hooks.on_trainer_event(self.jobs.repo.get(job_id), metric_event(step, value))

    def finish(self, job_id: str, values: list[float]) -> None:
        advance(self.jobs.repo, job_id, *TO_TRAINING)
        for step, value in enumerate(values, start=1):
            self.report(job_id, step, value)
        advance(self.jobs.repo, job_id, S.COMPLETED)
