"""The ports the service layer depends on. adapters/ implements them against AWS; tests use fakes.

Keep these signatures stable: the API, the lifecycle tasks, the scheduler and the retraining
dispatcher all program against them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from schemas.job import CheckpointRef, Job, Progress, StatusEvent
from schemas.lifecycle import Decision
from schemas.status import JobStatus

if TYPE_CHECKING:  # annotations only: the API Lambda's cold start need not build the trainer's models
    from schemas.api import LogsResponse
    from schemas.checkpoint import CheckpointManifest
    from schemas.trainer import TrainerEvent


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
    ) -> Job:
        """Conditional edit of non-status fields (PATCH, pending_action...); version + 1.

        ConcurrentModification on a version mismatch; IllegalTransition (naming `action`) if `allowed`
        is given and the job's status is not in it. `event`, when given, is appended to the history in
        the same transaction (a verb that records a request without changing the status).
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

    def history(self, job_id: str) -> list[StatusEvent]:
        """The job's status history, oldest first."""

    def queued(self, queue: str, limit: int = 100) -> list[Job]:
        """QUEUED jobs of one queue by (priority desc, submitted asc), by Query on the sparse index."""

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
