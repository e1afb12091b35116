"""The reconciler: repairs what missed events and restarts leave behind (local timer; a scheduled Lambda in AWS).

- A run that ended without its end being reported (a missed EventBridge event, a monitor that died):
  its end is reported now (on_run_finished, which decides exactly as the event would have).
- A job in a running status whose lifecycle execution is gone (after a restart of `trainplane up`,
  or an execution that failed): its run, if any, is stopped, and the job is PREEMPTED, so that it
  resumes from its latest checkpoint within its preemption budget.
- A waiting job (PENDING, QUEUED, PAUSED, or PREEMPTED with budget left) without a live execution gets
  a new one; the old one, if it ever comes back, finds itself superseded and ends.
- Capacity held by jobs that no longer run is given back, then a scheduler pass fills it.
- Runs that are alive get a heartbeat, so their WaitForRun does not time out between reports.
- Runs whose reports stopped arriving (the CloudWatch Logs subscription down, deliveries dropped) are
  caught up from S3: checkpoints from their manifests, progress from metrics.jsonl. A run's end does
  the same before it is decided (LifecycleService.catch_up), so even a run none of whose reports
  arrived ends with the record it would have had.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from functions.errors import ConcurrentModification, IllegalTransition, JobNotFound
from functions.service.lifecycle import LifecycleService
from functions.service.ports import (
    TERMINAL_RUN_STATES,
    Executions,
    JobQuery,
    JobRepository,
    Launcher,
    LaunchHandle,
    RunDescription,
    RunState,
)
from schemas.job import Job
from schemas.lifecycle import Next
from schemas.status import BEFORE_RUN, RUNNING, JobStatus

logger = logging.getLogger(__name__)

S = JobStatus
_WAITING = frozenset({S.PENDING, S.QUEUED, S.PAUSED})
_LISTED = (S.SCHEDULING, S.PREPARING, S.TRAINING, S.CHECKPOINTING, S.EVALUATING, S.EXPORTING, S.PENDING, S.QUEUED, S.PAUSED, S.PREEMPTED)


@dataclass
class ReconcileReport:
    reported_ends: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    caught_up: list[str] = field(default_factory=list)
    heartbeats: int = 0


class Reconciler:
    def __init__(
        self,
        repository: JobRepository,
        service: LifecycleService,
        executions: Executions,
        launchers: Mapping[str, Launcher],
        *,
        grace_seconds: float = 60.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.repository = repository
        self.service = service
        self.executions = executions
        self.launchers = launchers
        self.grace_seconds = grace_seconds
        self.clock = clock
        self._suspects: set[tuple[str, str]] = set()

    def run_once(self, *, startup: bool = False) -> ReconcileReport:
        """One sweep. At start-up nothing can be in flight yet, so there is no grace for recent changes."""
        report = ReconcileReport()
        for job in self._jobs():
            try:
                self._reconcile(job, report, startup=startup)
            except (ConcurrentModification, IllegalTransition, JobNotFound) as exc:
                logger.info("job %s changed while reconciling (%s); next sweep", job.job_id, exc)
            except Exception:
                logger.exception("reconciling %s failed; next sweep", job.job_id)
        self._release_orphan_claims(report)
        self.service.scheduler.run_pass()
        return report

    def _jobs(self) -> Iterator[Job]:
        """Every job in a status the reconciler looks after, running statuses first.

        The status counters (one read) say which statuses have jobs at all: an idle deployment costs
        one read per sweep. Otherwise one pass over the listing, filtered here: the listing index
        holds every job, so one unfiltered pass reads it once where a query per status would read it
        once per status. (An index of active jobs only would make this O(active).)"""
        counts = self.repository.counts(None)
        if not any(counts.get(status, 0) > 0 for status in _LISTED):
            return
        found: list[Job] = []
        token: str | None = None
        while True:
            jobs, token = self.repository.list_jobs(JobQuery(owner=None, limit=100, next_token=token))
            found.extend(job for job in jobs if job.status in _LISTED)
            if not token:
                break
        order = {status: i for i, status in enumerate(_LISTED)}
        yield from sorted(found, key=lambda job: order[job.status])

    def _settled(self, job: Job, startup: bool) -> bool:
        return startup or (self.clock() - job.updated_at).total_seconds() >= self.grace_seconds

    def _reconcile(self, job: Job, report: ReconcileReport, *, startup: bool) -> None:
        decided = False  # this sweep wrote the job's latest status: nothing else is in flight for it
        if job.status in RUNNING:
            description = self._describe(job)
            alive = self.executions.execution_running(job.execution_arn)
            if description is not None and description.state in TERMINAL_RUN_STATES:
                if description.state == RunState.UNKNOWN:
                    # Not known to this control plane (e.g. left by a `trainplane up` killed with -9):
                    # a launcher stops such a run only if it really is this job's.
                    self._stop(job)
                self.service.on_run_finished(job.job_id, job.attempt, description)
                report.reported_ends.append(job.job_id)
                if alive:
                    return  # its own execution carries on from the decision
                job, decided = self.repository.get(job.job_id), True
            elif not alive and self._settled(job, startup):
                if job.run_handle:
                    self._stop(job)
                lost = RunDescription(state=RunState.UNKNOWN, message="its lifecycle execution was lost (control plane restarted?)")
                self.service.on_run_finished(job.job_id, job.attempt, lost)
                report.preempted.append(job.job_id)
                job, decided = self.repository.get(job.job_id), True
            elif alive and description is not None:
                self.service.on_run_alive(job.job_id, job.attempt)
                report.heartbeats += 1
                if self._reports_stale(job) and self.service.catch_up(job.job_id):
                    report.caught_up.append(job.job_id)
                return
        if not self._needs_execution(job) or not (decided or self._settled(job, startup)):
            return
        if self.executions.execution_running(job.execution_arn):
            return
        # A QUEUED job may still carry the dead execution's capacity token: a pass answering it moves the
        # job to SCHEDULING, and the new execution's capacity wait then sees that and goes on ("go").
        # Recorded before it starts: its first task must find itself the job's current execution.
        arn = self.executions.start(job, before_start=lambda arn: self.repository.annotate(job.job_id, {"execution_arn": arn}))
        report.restarted.append(job.job_id)
        logger.info("job %s (%s) had no live execution: started %s", job.job_id, job.status.value, arn)

    def _reports_stale(self, job: Job) -> bool:
        """No progress report for a while: the reports may be lost, S3 says what the run has done."""
        updated = job.progress.updated_at or job.run_started_at
        return updated is None or (self.clock() - updated).total_seconds() >= self.grace_seconds

    def _needs_execution(self, job: Job) -> bool:
        if job.status in _WAITING:
            return True
        return (
            job.status == S.PREEMPTED
            and job.preemptions <= self.service.config.max_preemptions
            and job.run_outcome == Next.RESUME_PREEMPTED
        )

    def _describe(self, job: Job) -> RunDescription | None:
        if not job.run_handle or job.status in BEFORE_RUN:
            return None
        handle = LaunchHandle.from_dict(job.run_handle)
        if handle.attempt != job.attempt or handle.launcher not in self.launchers:
            return None
        return self.launchers[handle.launcher].describe(handle)

    def _stop(self, job: Job) -> None:
        assert job.run_handle is not None
        handle = LaunchHandle.from_dict(job.run_handle)
        launcher = self.launchers.get(handle.launcher)
        if launcher is not None:
            launcher.stop(handle, graceful=True)

    def _release_orphan_claims(self, report: ReconcileReport) -> None:
        """Claims whose job does not run. Only on the second sweep that sees one: a scheduler pass holds a
        claim for a moment before its QUEUED -> SCHEDULING write lands, and that claim is not an orphan."""
        scheduler = self.service.scheduler
        suspects: set[tuple[str, str]] = set()
        for pool in scheduler.ledger.pools():
            for job_id in scheduler.ledger.holders(pool):
                try:
                    job: Job | None = self.repository.get(job_id)
                except JobNotFound:
                    job = None
                if job is not None and job.status in RUNNING and job.capacity_pool == pool:
                    continue
                if (pool, job_id) in self._suspects and scheduler.ledger.release(pool, job_id):
                    report.released.append(job_id)
                else:
                    suspects.add((pool, job_id))
        self._suspects = suspects
