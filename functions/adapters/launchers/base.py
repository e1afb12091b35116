"""The Launcher port: how one attempt of a job gets (and gives back) compute.

Implementations: LocalLauncher (a child process on this machine), SageMakerLauncher
(CreateTrainingJob), EC2Launcher (RunInstances). The lifecycle service only sees this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from schemas.job import ErrorType
from schemas.trainer import RunSpec


@dataclass(frozen=True)
class LaunchRequest:
    job_id: str
    attempt: int
    owner: str
    run_spec: RunSpec
    run_spec_uri: str
    labels: dict[str, str] = field(default_factory=dict)
    preemptible: bool = False
    max_runtime_seconds: int | None = None


@dataclass(frozen=True)
class LaunchHandle:
    """Stored on the job as `run_handle` (a dict of strings), enough to find the run again."""

    launcher: str  # "local" | "sagemaker" | "ec2"
    run_id: str  # pid, training job name, or instance id(s)
    attempt: int
    extra: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, str]:
        return {"launcher": self.launcher, "run_id": self.run_id, "attempt": str(self.attempt), **self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> LaunchHandle:
        rest = {k: v for k, v in data.items() if k not in {"launcher", "run_id", "attempt"}}
        return cls(launcher=data["launcher"], run_id=data["run_id"], attempt=int(data["attempt"]), extra=rest)


class RunState(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"  # graceful stop finished with a checkpoint
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"  # spot reclaimed, instance or process lost
    UNKNOWN = "UNKNOWN"  # the run cannot be found (e.g. the process is gone after a restart)


TERMINAL_RUN_STATES = frozenset({RunState.COMPLETED, RunState.STOPPED, RunState.FAILED, RunState.PREEMPTED, RunState.UNKNOWN})


@dataclass(frozen=True)
class RunDescription:
    state: RunState
    error_type: ErrorType | None = None
    message: str | None = None
    secondary_status: str | None = None
    billable_seconds: float | None = None  # per instance, as AWS bills it (SageMaker: BillableTimeInSeconds)
    # For the cost record (functions/service/costs.py): what ran, how many, for how long, on spot or not.
    run_seconds: float | None = None  # wall-clock seconds the instances were held (SageMaker: TrainingTimeInSeconds)
    instance_type: str | None = None
    instance_count: int = 1
    spot: bool = False


class Launcher(Protocol):
    name: str

    def launch(self, request: LaunchRequest) -> LaunchHandle:
        """Start the attempt; returns as soon as the run exists (does not wait for it)."""

    def stop(self, handle: LaunchHandle, *, graceful: bool = True) -> None:
        """Graceful: SIGTERM (the trainer checkpoints), then the grace period, then kill. Idempotent."""

    def describe(self, handle: LaunchHandle) -> RunDescription:
        """Where the run stands now (the reconciler's view when events were missed)."""
