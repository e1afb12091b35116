"""What a running attempt tells its job: the trainer's reports and the launcher's signs of life.

`RunReports` is a base of `LifecycleService` (functions/service/lifecycle.py): the state machine's tasks
and the run's end are decided there; here the record follows the run while it runs (phase, progress,
checkpoints, tracking, idle GPUs), S3 fills in reports that were lost (`catch_up`), and every sign of
life keeps the WaitForRun heartbeat fresh and checks the job's budget and deadline. A module of its own
to keep the lifecycle under ~600 lines; it reads the service's collaborators declared below.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from functions import constants
from functions.service import costs, telemetry
from functions.service.placement import PlacementService
from functions.service.ports import ArtifactStore, JobRepository, RunStopper, TaskTokens
from functions.service.run_specs import RunSpecs, progress_of
from schemas.job import Actor, ErrorType, Job
from schemas.lifecycle import WaitKind
from schemas.status import RUNNING, JobStatus
from schemas.tracking import TrackingRecord
from schemas.trainer import TrainerEvent, TrainerEventKind, TrainerPhase

logger = logging.getLogger(__name__)

S = JobStatus
# Phases the trainer reports while it runs; the machine itself never waits in them.
RUN_PHASES = frozenset({S.TRAINING, S.CHECKPOINTING, S.EVALUATING, S.EXPORTING})
_PHASE_STATUS = {
    TrainerPhase.TRAINING: S.TRAINING,
    TrainerPhase.CHECKPOINTING: S.CHECKPOINTING,
    TrainerPhase.EVALUATING: S.EVALUATING,
    TrainerPhase.EXPORTING: S.EXPORTING,
}


class ReportIntervals(Protocol):
    """The part of LifecycleConfig the reports read: how often each report may cost a write or a call."""

    @property
    def heartbeat_seconds(self) -> int: ...
    @property
    def progress_interval_seconds(self) -> float: ...
    @property
    def budget_check_seconds(self) -> float: ...


class RunReports:
    # Set by LifecycleService.__init__ (and sweep_hooks, placement by the composition root).
    repository: JobRepository
    artifacts: ArtifactStore
    tokens: TaskTokens
    runs: RunStopper
    specs: RunSpecs
    config: ReportIntervals
    clock: Callable[[], datetime]
    sweep_hooks: Any
    placement: PlacementService | None

    if TYPE_CHECKING:
        # LifecycleService's one conditional transition (a phase report moves the job as a task does).
        def _move(
            self, job: Job, to: JobStatus, reason: str, actor: Actor, changes: Mapping[str, Any], *, quiet: bool = False
        ) -> Job | None: ...

    def __init__(self) -> None:
        self._last_heartbeat: dict[str, float] = {}
        self._last_progress: dict[tuple[str, int], float] = {}
        self._last_budget_check: dict[tuple[str, int], float] = {}
        self._heartbeat_lock = threading.Lock()

    def on_trainer_event(self, job_id: str, attempt: int, event: TrainerEvent) -> None:
        """One report of the trainer (the TrainerReports port): phase, progress, checkpoint, metrics, done.

        Delivery is at least once and unordered (the LocalLauncher's reader, a CloudWatch Logs
        subscription), so each kind is applied idempotently: a phase only if its seq is newer than the
        last phase applied (Job.report_seq), progress only if it supersedes the stored one, a checkpoint
        by its id (latest = highest step). Reports of another attempt change nothing. Any report of the
        current attempt is a sign of life (heartbeat, budget check). The run's end is never decided from
        a report: only from the engine (launcher monitor, EventBridge, reconciler).
        """
        job = self.repository.get(job_id)
        if attempt != job.attempt or (event.attempt is not None and event.attempt != attempt):
            return
        if event.kind == TrainerEventKind.CHECKPOINT:
            # A checkpoint exists once its manifest does, whatever the job's status now (the pause's
            # checkpoint may be reported after the pause landed): always recorded.
            self._on_checkpoint(job, event)
        if event.kind == TrainerEventKind.TRACKING:
            # The tracker run this job logs to (whatever the status now: a stop may race the report).
            self._on_tracking(job, event)
        if job.status not in RUN_PHASES:
            return
        if self.sweep_hooks is not None:
            self.sweep_hooks.on_trainer_event(job, event)
        if event.kind == TrainerEventKind.SYSTEM and (idle := telemetry.idle_period(event)) is not None:
            self.repository.report_gpus_idle(job_id, idle)  # once per idle period: the repository keeps its mark
        if event.kind == TrainerEventKind.PHASE:
            self._on_phase(job, event)
        elif event.kind == TrainerEventKind.PROGRESS and self._progress_due(job_id, attempt, event):
            self.repository.record_progress(job_id, progress_of(event.data, self.clock(), attempt))
        self._heartbeat(job)
        self._check_budget(job)
        self._check_deadline(job)

    def _on_tracking(self, job: Job, event: TrainerEvent) -> None:
        try:
            record = TrackingRecord.model_validate(event.data)
        except ValueError:
            logger.warning("tracking report of %s is not a TrackingRecord: ignored", job.job_id)
            return
        if record != job.tracking:
            self.repository.annotate(job.job_id, {"tracking": record})

    def catch_up(self, job_id: str, *, completed: bool = False) -> bool:
        """Bring the record's checkpoints and progress up to what S3 holds (manifests, metrics.jsonl).

        For reports that were lost (the channel was down, a delivery dropped): S3 is the truth of what a
        run produced. `completed`: the run finished, so its progress is 100 %. True if anything changed.
        """
        job = self.repository.get(job_id)
        changed = False
        manifests = self.artifacts.list_manifests(job_id)
        update = self.specs.catch_up_checkpoints(job, manifests, self.clock())
        if update is not None:
            refs, best = update
            keep = [r.checkpoint_id for r in refs]
            missing = [r for r in sorted(refs, key=lambda r: r.step) if r not in job.checkpoints]
            # Only refs dropped on S3 or a new best: one write with the newest settles it.
            for ref in missing or [max(refs, key=lambda r: r.step)]:
                self.repository.add_checkpoint(job_id, ref, best_checkpoint_id=best, keep=keep)
            changed = True
            job = self.repository.get(job_id)
        progress = self.specs.progress_from_metrics(job, self.artifacts.read_lines(constants.metrics_key(job_id)), self.clock(), completed)
        if progress is not None and progress.supersedes(job.progress):
            changed = self.repository.record_progress(job_id, progress) or changed
        return changed

    def on_run_alive(self, job_id: str, attempt: int) -> None:
        """The launcher sees the run alive: keep the WaitForRun heartbeat fresh between trainer reports."""
        job = self.repository.get(job_id)
        if attempt == job.attempt and job.status in RUNNING:
            self._heartbeat(job)
            self._check_budget(job)
            self._check_deadline(job)

    # ================================================================ internals
    def _check_budget(self, job: Job) -> None:
        """Stop a run (gracefully, with a checkpoint) that would pass scheduling_config.max_cost_usd (costs.stop_over_budget)."""
        if job.scheduling_config.max_cost_usd is None or not job.run_handle:
            return
        if job.pending_action is not None or job.error_type == ErrorType.BUDGET:
            return  # already being stopped (pause, preemption, cancel, or this check)
        now = time.monotonic()
        key = (job.job_id, job.attempt)
        with self._heartbeat_lock:
            if now - self._last_budget_check.get(key, float("-inf")) < self.config.budget_check_seconds:
                return
            self._last_budget_check[key] = now
        verdict = costs.check_budget(job, interval_seconds=self.config.budget_check_seconds, now=self.clock())
        if not verdict.exceeded:
            return
        logger.info("budget exceeded, stopping the run", extra={"job_id": job.job_id, "spent_usd": verdict.spent_usd})
        costs.stop_over_budget(self.repository, job, verdict, stop=lambda j, reason: self.runs.stop_run(j, graceful=True, reason=reason))

    def _check_deadline(self, job: Job) -> None:
        if self.placement is not None:
            self.placement.check_deadline(job, self.repository, self.runs)

    def _on_phase(self, job: Job, event: TrainerEvent) -> None:
        try:
            target = _PHASE_STATUS[TrainerPhase(str(event.data.get("phase")))]
        except (KeyError, ValueError):
            return  # PREPARING or unknown: nothing the job record tracks
        attempt = job.attempt
        seq = event.seq
        for _ in range(3):
            if job.status not in RUN_PHASES or job.attempt != attempt:
                return
            if seq is not None and job.report_seq is not None and seq <= job.report_seq:
                return  # a repeated or older phase report: a newer one was applied already
            if job.status == target:
                if seq is not None:
                    # Already there (e.g. the launch wrote TRAINING): remember the report, so an older one
                    # arriving later cannot move the job back.
                    self.repository.annotate(job.job_id, {"report_seq": seq})
                return
            if job.pending_action is not None and target != S.CHECKPOINTING:
                # A stop is pending (pause, budget pause, reclaim): the only phase it takes is the stop's own
                # checkpoint. A trainer that reports TRAINING after that save (an older image, a stand-in) is
                # exiting, not training: the timeline reads TRAINING -> CHECKPOINTING -> PAUSED / QUEUED.
                return
            changes = {"report_seq": seq} if seq is not None else {}
            if self._move(job, target, f"trainer reported {target.value}", Actor.TRAINER, changes, quiet=True) is not None:
                return
            job = self.repository.get(job.job_id)

    def _on_checkpoint(self, job: Job, event: TrainerEvent) -> None:
        recorded = self.specs.checkpoint(job, event.data, self.clock())
        if recorded is None:
            return
        ref, best, keep = recorded
        if ref in job.checkpoints and best == job.best_checkpoint_id and {r.checkpoint_id for r in job.checkpoints} <= set(keep):
            return  # a repeated report: nothing to change
        self.repository.add_checkpoint(job.job_id, ref, best_checkpoint_id=best, keep=keep)

    def _progress_due(self, job_id: str, attempt: int, event: TrainerEvent) -> bool:
        total, step = event.data.get("total_steps"), event.data.get("step")
        if total is not None and step is not None and step >= total:
            return True
        now = time.monotonic()
        with self._heartbeat_lock:
            if now - self._last_progress.get((job_id, attempt), float("-inf")) < self.config.progress_interval_seconds:
                return False
            self._last_progress[(job_id, attempt)] = now
        return True

    def _heartbeat(self, job: Job) -> None:
        if not job.task_token or job.task_token_kind != WaitKind.RUN:
            return
        now = time.monotonic()
        with self._heartbeat_lock:
            if now - self._last_heartbeat.get(job.job_id, 0.0) < self.config.heartbeat_seconds / 4:
                return
            self._last_heartbeat[job.job_id] = now
        self.tokens.send_heartbeat(job.task_token)
