"""Every port the services depend on, declared on the services' side: functions/adapters/ implements them
against AWS (local mode hands its own launchers), tests use fakes, functions/composition.py wires them.

Keep these signatures stable: the API, the lifecycle tasks, the scheduler, the retraining dispatcher and the
sweeps all program against them. The values that cross a port (a Transition, a LaunchHandle, a Route ...)
live here too, so an adapter imports this module and nothing else of the services (import contracts hold
both directions: a service never imports an adapter).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from schemas.api import LogsResponse
from schemas.checkpoint import CheckpointManifest
from schemas.job import CheckpointRef, ErrorType, Job, Progress, StatusEvent
from schemas.lifecycle import Decision
from schemas.status import JobStatus
from schemas.trainer import RunSpec, TrainerEvent


@dataclass(frozen=True)
class JobQuery:
    owner: str | None  # None: every owner (admins)
    status: JobStatus | None = None
    queue: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    name_contains: str | None = None
    priority_min: int | None = None  # scheduling_config.priority, inclusive
    priority_max: int | None = None
    limit: int = 50
    next_token: str | None = None


@dataclass(frozen=True)
class Transition:
    """A status change: conditional on the job being in `from_status` at `expected_version`.

    `changes` are other attributes written in the same conditional write (error fields,
    pending_action, attempt counters, run_handle ...), as Job field names -> new values; a value of
    None removes the attribute.
    """

    job_id: str
    expected_version: int
    from_status: JobStatus
    to_status: JobStatus
    reason: str = ""
    actor: str = "system"
    changes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reclaim:
    """Why a borrowing job is being paused (issue 24.3): written as its `Trainplane Job Reclaimed` event in
    the same transaction as the update that marks it for the checkpointed pause."""

    team: str  # the victim's (the borrower)
    gpu_type: str
    gpus: int
    beneficiary_job_id: str
    beneficiary_team: str  # the lender
    rule: str
    work_lost_gpu_seconds: float


@dataclass(frozen=True)
class GpuIdle:
    """One idle period of one node's GPUs (schemas/telemetry.py), written as the job's `Trainplane Job GPUs
    Idle` event at most once: `mark` names the period (attempt, node, its first sample)."""

    attempt: int
    node: int
    idle_since: float  # epoch seconds
    idle_seconds: float
    threshold_pct: float
    devices: tuple[tuple[int, str | None, float | None], ...]  # (index, name, utilization_pct)

    @property
    def mark(self) -> str:
        return f"{self.attempt}#{self.node}#{self.idle_since:.3f}"


@dataclass(frozen=True)
class NameClaim:
    """A name at most one job holds at a time (POST /train's run_id, per owner), taken in the very write
    that creates the job: the claim item names its holder, and the job is created only if the claim is
    still what the caller read (`previous_job_id`: the finished holder it saw, None when there was none).
    Two creators racing for one name: exactly one wins, the other gets NameTaken."""

    key: str  # the name in its scope, e.g. "train#<owner arn>#<run_id>"
    previous_job_id: str | None = None


class JobRepository(Protocol):
    def create(self, job: Job, first_event: StatusEvent, claim: NameClaim | None = None) -> None:
        """Put a new job and its first history entry; ConcurrentModification if the id exists. With `claim`,
        the job also becomes the name's holder in the same transaction, or nothing is written and NameTaken
        names the holder found."""

    def name_holder(self, key: str) -> str | None:
        """The job id holding a NameClaim key (consistent read), None if nobody ever claimed it."""

    def get(self, job_id: str) -> Job:
        """The job; JobNotFound if there is none."""

    def list_jobs(self, query: JobQuery) -> tuple[list[Job], str | None]:
        """Newest first, filters ANDed, at most query.limit jobs, and an opaque token for the next page."""

    def transition(self, t: Transition) -> Job:
        """Conditional status change + history entry + status counters, in one transaction.

        IllegalTransition if the table forbids from->to; ConcurrentModification if the stored job is
        no longer at (from_status, expected_version). Returns the job as written (version + 1).
        """

    def update(
        self,
        job_id: str,
        expected_version: int,
        changes: Mapping[str, Any],
        allowed: frozenset[JobStatus] | None = None,
        *,
        event: StatusEvent | None = None,
        action: str = "update",
        reclaim: Reclaim | None = None,
    ) -> Job:
        """Conditional edit of non-status fields (PATCH, pending_action...); version + 1.

        ConcurrentModification on a version mismatch; IllegalTransition (naming `action`) if `allowed`
        is given and the job's status is not in it. `event`, when given, is appended to the history in
        the same transaction (a verb that records a request without changing the status); `reclaim`,
        when given, is the job's `Trainplane Job Reclaimed` event, written to the outbox in it too.
        """

    def annotate(self, job_id: str, changes: Mapping[str, Any]) -> None:
        """Unversioned write of bookkeeping fields no status decision reads (execution_arn, queue_position...).

        Never a 409 and never bumps the version, so it cannot make a concurrent transition lose its race.
        JobNotFound if there is no such job.
        """

    def append_event(self, job_id: str, event: StatusEvent) -> None:
        """Append a history entry without touching the job (e.g. "retried as job X" on a terminal job)."""

    def record_progress(self, job_id: str, progress: Progress) -> bool:
        """Unversioned write of the progress attribute (frequent, never a 409), only if it supersedes the
        stored progress (Progress.supersedes): False when a newer one is already there."""

    def add_checkpoint(
        self, job_id: str, ref: CheckpointRef, *, best_checkpoint_id: str | None = None, keep: list[str] | None = None
    ) -> Job:
        """Add or replace a checkpoint; latest = the highest step, best as given; `keep` drops refs no longer
        retained. Unversioned."""

    def report_gpus_idle(self, job_id: str, idle: GpuIdle) -> bool:
        """Write the job's `Trainplane Job GPUs Idle` event for this idle period, in one transaction with the
        job's record of the period reported: False (nothing written) when that period was already
        reported (a repeated or later report of it). Unversioned; JobNotFound if there is no such job."""

    def history(self, job_id: str) -> list[StatusEvent]:
        """The job's status history, oldest first."""

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        """QUEUED jobs of one queue by (priority desc, submitted asc), by Query on the sparse index."""

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        """The jobs of `job_ids` that exist, by id, read consistently (in a few calls: a pass reads every holder)."""

    def queued_of_team(self, team: str, gpu_type: str, limit: int = 100) -> list[Job]:
        """QUEUED jobs of one team (`default` for a job without one) asking for one quota type (gpu_type_of),
        in every queue, by (priority desc, submitted asc), by Query on the sparse per-team index."""

    def counts(self, owner: str | None) -> dict[JobStatus, int]:
        """Jobs by status for one owner (None: all), from counters kept by transition()."""

    def delete(self, job_id: str, expected_version: int | None = None) -> None:
        """Remove the job, its history and its counters' contribution.

        With `expected_version`, ConcurrentModification if the job changed since it was read.
        """


class ArtifactStore(Protocol):
    """S3 under the artifacts bucket: the job's prefix, its checkpoints (manifests) and metrics."""

    def delete_prefix(self, prefix: str) -> int: ...

    def list_manifests(self, job_id: str) -> list[CheckpointManifest]: ...

    def checkpoint_uri(self, job_id: str, checkpoint_id: str) -> str: ...

    def put_json(self, key: str, document: Mapping[str, Any]) -> str: ...

    def read_lines(self, key: str) -> Iterator[str]: ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under the prefix, in key order (e.g. a job's log files, one per attempt)."""
        ...

    def first_keys(self, prefix: str, limit: int) -> list[str]:
        """At most `limit` keys under the prefix (is anything there?), in key order."""
        ...


class Workflow(Protocol):
    """The lifecycle engine as the API service sees it (Step Functions in AWS and in local mode).

    The service makes every status decision with a conditional write first; these calls then make
    the engine act on the decision that won.
    """

    def start(self, job: Job) -> str:
        """Start the job's lifecycle execution (named after the job and attempt); returns its ARN."""

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None:
        """Stop the job's running attempt: graceful = SIGTERM with checkpoint (pause, preempt), else cancel."""

    def answer_wait(self, job: Job, decision: Decision, detail: Mapping[str, Any] | None = None) -> None:
        """Answer the task token the job's execution waits on (capacity or resume): 'resume', 'cancel', 'go'."""


class TrainerReports(Protocol):
    """Where a run's reports go: phase, progress, metrics, checkpoint, done (TrainerEvent) and "alive".

    Implemented by the lifecycle service (LifecycleService). Two transports deliver here, one per kind
    of compute: the LocalLauncher's stdout reader (compute local) and, for SageMaker and EC2, the
    CloudWatch Logs subscription on the trainer's log groups -> the events Lambda
    (functions/service/trainer_reports.py). Delivery is at least once and unordered: the
    implementation applies each report once and in order (docs/TRAINER.md, "Reports").
    """

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        """One report of attempt `attempt` of the job; stale, repeated and older ones change nothing."""

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        """The run is alive (no report of its own): keep its wait from timing out."""


class LogSource(Protocol):
    """Where a job's trainer logs live when they are not the S3 files (CloudWatch for the cloud engines)."""

    def read(self, job: Job, *, since: float | None = None, next_token: str | None = None, limit: int = 1000) -> LogsResponse:
        """Every attempt's lines in order, after `since` (epoch seconds, exclusive), paged."""


# --- compute: the Launcher port -------------------------------------------------------------------


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
    zone: str | None = None  # the availability zone placement chose (docs/PLACEMENT.md); None = any
    # SageMaker on-demand: instance types in order for InstancePreferences (placement's same-shape candidates).
    instance_preferences: tuple[str, ...] = ()
    # EC2: (instance type, zone or None) pools in order for one instant EC2 Fleet (placement's same-shape,
    # same-purchase candidates x zones, docs/PLACEMENT.md); empty: one RunInstances of the run spec's type.
    fleet_pools: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class PoolFailure:
    """One pool a launch tried that had no capacity (an EC2 Fleet's Errors entry): placement blocks it."""

    instance_type: str
    zone: str | None
    code: str
    message: str

    # A run handle's extra holds strings: the failures travel as one JSON list under this key.
    EXTRA_KEY: ClassVar[str] = "pool_failures"

    @staticmethod
    def to_extra(failures: Sequence[PoolFailure]) -> str:
        rows = [{"instance_type": f.instance_type, "zone": f.zone, "code": f.code, "message": f.message[:200]} for f in failures]
        return json.dumps(rows, separators=(",", ":"))

    @staticmethod
    def from_extra(extra: Mapping[str, str]) -> tuple[PoolFailure, ...]:
        rows = json.loads(extra.get(PoolFailure.EXTRA_KEY) or "[]")
        return tuple(PoolFailure(str(r["instance_type"]), r.get("zone"), str(r["code"]), str(r["message"])) for r in rows)


class CapacityRefused(RuntimeError):
    """A launcher found no capacity in any pool it tried; `failures` names each pool (may be empty)."""

    def __init__(self, message: str, failures: tuple[PoolFailure, ...] = ()) -> None:
        super().__init__(message)
        self.failures = failures


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


class TrainingJobEvents(Protocol):
    """A SageMaker DescribeTrainingJob response, or the detail of its state-change event (the same shape),
    as a RunDescription: functions/adapters/launchers/sagemaker.py `describe_training_job`, which the
    SageMaker launcher's describe() uses too, so a missed event and a received one reach the same verdict."""

    def __call__(self, detail: Mapping[str, Any], /) -> RunDescription: ...


class RunReports(Protocol):
    """What the cloud events service and the reconciler tell functions.service.lifecycle.LifecycleService."""

    def on_run_finished(self, job_id: str, attempt: int, run: RunDescription) -> None: ...

    def on_run_alive(self, job_id: str, attempt: int) -> None: ...


class Ec2Runs(Protocol):
    """What the cloud events service needs of functions.adapters.launchers.ec2.EC2Launcher besides describe()."""

    def job_ref(self, instance_id: str) -> tuple[str, int] | None: ...

    def mark_interrupted(self, instance_id: str) -> None: ...

    def describe(self, handle: LaunchHandle) -> RunDescription: ...


# --- the scheduler and the lifecycle engine --------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    pool: str
    units: int


@dataclass(frozen=True)
class TeamHold:
    """A claim's second condition (issue 24): its team's units of one GPU type, across every pool, stay
    within `limit` (the team's nominal quota plus its borrow limit)."""

    team: str
    gpu_type: str
    limit: int


class CapacityLedger(Protocol):
    """Capacity claims per pool, each a conditional write (DynamoDB in AWS and local mode)."""

    def claim(self, pool: str, job_id: str, units: int, capacity: int, team: TeamHold | None = None) -> bool:
        """Hold `units` of `pool` for the job if that keeps the pool within `capacity`, the job holds none
        yet and (given `team`) the team's units of that type within its limit, all in one write; True only
        for the call that made the claim (so only its maker may undo it)."""

    def release(self, pool: str, job_id: str) -> bool:
        """Give the job's units back (to its pool and to its team's hold); False if it held none (idempotent)."""

    def holders(self, pool: str) -> dict[str, int]: ...

    def pools(self) -> list[str]: ...

    def register_queue(self, queue: str) -> None: ...

    def queues(self) -> list[str]: ...


@dataclass(frozen=True)
class PoolState:
    """One pool's health (platform/instance type/zone/purchase): its failures and until when it is blocked."""

    pool: str
    capacity_errors: int = 0
    preemptions: int = 0
    blocked_until: float = 0.0  # epoch seconds
    last_reason: str = ""


class PoolHealth(Protocol):
    """Pool health, durable (DynamoDB in AWS and local mode; functions/adapters/pool_health.py)."""

    def record(self, pool: str, kind: str, now: float, reason: str) -> PoolState:
        """Count a 'capacity' error or a 'preempted' run in `pool` (one atomic add): the pool's state after it."""

    def block(self, pool: str, until: float) -> None:
        """Block `pool` until `until`; a block is only ever extended (two reporters racing keep the longer one)."""

    def states(self, pools: Sequence[str]) -> dict[str, PoolState]:
        """The known pools among `pools` (a pool never recorded is healthy and absent)."""


class CapacityModel(Protocol):
    def demand(self, job: Job) -> Demand: ...

    def capacity(self, pool: str) -> int: ...


class TokenAnswerer(Protocol):
    """Step Functions' task tokens as the scheduler sees them (functions/adapters/stepfunctions.py)."""

    def send_success(self, token: str, output: Mapping[str, Any]) -> bool:
        """Answer a task token; False if it is no longer valid (already answered, execution gone)."""


class TaskTokens(TokenAnswerer, Protocol):
    """Task tokens as the lifecycle service sees them: answered, and kept alive while a run reports."""

    def send_heartbeat(self, token: str) -> bool: ...


class RunStopper(Protocol):
    """Stops a job's running attempt (the scheduler preempting, the lifecycle's cost limit): Workflow.stop_run."""

    def stop_run(self, job: Job, *, graceful: bool, reason: str) -> None: ...


class Executions(Protocol):
    """The lifecycle executions as the reconciler sees them (functions/adapters/stepfunctions.py)."""

    def start(self, job: Job, *, before_start: Callable[[str], None] | None = None) -> str: ...

    def execution_running(self, execution_arn: str | None) -> bool: ...
