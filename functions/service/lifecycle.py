"""The lifecycle use cases behind the state machine's tasks and the run's end (the trainer's reports
while it runs: functions/service/run_reports.py, a base of LifecycleService).

The state machine (infra/statemachine/lifecycle.asl.json) only routes: every status change is made
here with a conditional write (repository.transition) that checks the transition table and the job's
version, so a race (pause vs completion, cancel vs launch, resume vs cancel) is decided exactly once,
by whichever write lands first; the loser re-reads the job and follows what the winner decided.

Each task returns {"next": ...}, the value the machine's Choice states route on. Waiting tasks store
their token on the job and, if the job has already moved on (the answer came before the token was
stored), answer their own token at once, so no wait is ever left without someone to end it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from functions import constants
from functions.errors import ConcurrentModification, IllegalTransition, InvalidRequest
from functions.service import costs
from functions.service.lifecycle_outcomes import decide_run_end
from functions.service.paths import PathRules
from functions.service.placement import PlacementService, fleet_pools, launch_choice, placement_fields
from functions.service.ports import (
    ArtifactStore,
    CapacityRefused,
    JobRepository,
    Launcher,
    LaunchHandle,
    LaunchRequest,
    PoolFailure,
    RunDescription,
    RunState,
    RunStopper,
    TaskTokens,
    Transition,
)
from functions.service.run_reports import RunReports
from functions.service.run_specs import RunSpecs
from functions.service.scheduler import NeverFits, Scheduler
from schemas.job import Actor, ErrorType, Job
from schemas.lifecycle import Next, WaitKind
from schemas.status import RUNNING, TERMINAL, JobStatus

logger = logging.getLogger(__name__)

S = JobStatus


_RACE_RETRIES = 8  # re-read-and-redecide rounds after a lost conditional write before giving up


class TransientError(Exception):
    """A lost race that kept losing, or a throttled AWS call: the state machine retries the task."""


@dataclass(frozen=True)
class LifecycleConfig:
    bucket: str
    launcher: str = "local"  # which launcher starts new runs (settings.compute)
    heartbeat_seconds: int = 600
    stop_grace_seconds: int = 120
    max_preemptions: int = 3
    timeout_margin_seconds: int = 300
    no_timeout_seconds: int = 99_999_999  # Step Functions' own "no limit" for a task
    # A trainer may report progress every step; the job record needs it every few seconds at most
    # (one DynamoDB write each). The last step is always written.
    progress_interval_seconds: float = 2.0
    # How often a running job with scheduling_config.max_cost_usd is priced (on progress reports and
    # liveness reports), and the horizon it is priced over: stopped if it would pass the limit by then.
    budget_check_seconds: float = 300.0


class LifecycleService(RunReports):
    """The state machine's tasks and the run's end; the reports of a running attempt come from the base
    (functions/service/run_reports.py)."""

    config: LifecycleConfig

    def __init__(
        self,
        repository: JobRepository,
        artifacts: ArtifactStore,
        launchers: Mapping[str, Launcher],
        tokens: TaskTokens,
        runs: RunStopper,
        scheduler: Scheduler,
        config: LifecycleConfig,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        paths: PathRules | None = None,
    ) -> None:
        super().__init__()
        self.repository = repository
        self.artifacts = artifacts
        self.launchers = launchers
        self.tokens = tokens
        self.runs = runs
        self.scheduler = scheduler
        self.config = config
        self.clock = clock
        # paths: the path rules that make each run spec's AccessSet (docs/SECURITY.md); the composition
        # root always gives them. Without them (a bare service in tests) run specs carry no access set.
        self.specs = RunSpecs(artifacts, config.bucket, paths)
        # Sweeps (functions/service/sweeps/hooks.py): a trial's reports and run end wake its sweep.
        self.sweep_hooks: Any = None
        # Placement (functions/service/placement.py): each attempt's candidate and pool; None: jobs' own resource_config.
        self.placement: PlacementService | None = None
        # Each job that completes, once (after the transition this task won): the forecast learns from it.
        self.completions: Callable[[Job], object] | None = None

    # ================================================================ state-machine tasks
    def admit(self, job_id: str, execution: str | None) -> dict[str, Any]:
        for _ in range(_RACE_RETRIES):
            job = self.repository.get(job_id)
            if self._superseded(job, execution):
                return {"next": Next.ENDED}
            self.scheduler.ledger.register_queue(job.queue)
            if job.status == S.QUEUED:
                return {"next": Next.WAIT_CAPACITY}
            if job.status == S.PAUSED:
                return {"next": Next.PAUSED}  # a new execution for a paused job (after a restart) waits for resume
            if job.status == S.PENDING:
                changes: dict[str, Any] = {}
                reason, actor = "admitted", Actor.SYSTEM
            elif job.status == S.PREEMPTED:
                if job.preemptions > self.config.max_preemptions:
                    return {"next": Next.ENDED}
                changes = {"error_type": None, "error_message": None, "resume_checkpoint_id": None}
                reason, actor = f"resuming after preemption from {job.latest_checkpoint_id or 'the start'}", Actor.SYSTEM
            else:
                return {"next": Next.ENDED}  # terminal, or a running job owned by another execution
            if self._move(job, S.QUEUED, reason, actor, changes) is not None:
                return {"next": Next.WAIT_CAPACITY}
        raise TransientError(f"admit {job_id}: kept losing races")

    def wait_capacity(self, job_id: str, execution: str | None, token: str) -> dict[str, Any]:
        job = self._store_token(job_id, execution, token, WaitKind.CAPACITY, waiting_in=frozenset({S.QUEUED}))
        if job is None:
            return {"next": Next.ANSWERED}
        try:
            self.scheduler.capacity.demand(job)
        except NeverFits as exc:
            failed = self._move(job, S.FAILED, str(exc), Actor.SCHEDULER, {"error_type": ErrorType.CAPACITY, "error_message": str(exc)})
            self.tokens.send_success(token, {"next": Next.FAILED if failed else Next.ENDED})
            return {"next": Next.ANSWERED}
        if self.scheduler.worth_a_pass(job):
            self.scheduler.run_pass([job.queue])
        return {"next": Next.WAITING}

    def prepare(self, job_id: str, execution: str | None) -> dict[str, Any]:
        for _ in range(_RACE_RETRIES):
            job = self.repository.get(job_id)
            if self._superseded(job, execution) or job.status != S.SCHEDULING:
                return self._left_run(job)
            attempt = job.attempt + 1
            try:
                placed = self.placement.choose(job, attempt) if self.placement is not None else {}
                resume_from = self.specs.resume_from(job, attempt)
                # paths checked again: ValueError naming the field
                spec = self.specs.run_spec(job.model_copy(update={"attempt": attempt, **placement_fields(placed)}), attempt, resume_from)
            except ValueError as exc:
                return self._fail(job, ErrorType.USER_ERROR, str(exc))
            uri = self.artifacts.put_json(
                constants.run_spec_key(job.job_id, attempt), spec.model_dump(mode="json", context={"reveal_secrets": True})
            )
            changes = {
                "attempt": attempt,
                "run_handle": None,
                "run_outcome": None,
                "run_started_at": None,
                "pending_action": None,
                "report_seq": None,
                **placed,
            }
            reason = f"attempt {attempt}: run spec {uri}" + (f", resuming from {resume_from}" if resume_from else "")
            if self._move(job, S.PREPARING, reason, Actor.SYSTEM, changes) is not None:
                return {"next": Next.LAUNCH}
        raise TransientError(f"prepare {job_id}: kept losing races")

    def launch(self, job_id: str, execution: str | None) -> dict[str, Any]:
        job = self.repository.get(job_id)
        if self._superseded(job, execution):
            return self._left_run(job)
        if job.status == S.PREPARING:
            # TRAINING is written before the run exists: a run that ends before its handle is stored
            # still finds its job in a running status (cancel vs launch is decided by this write).
            placed = self.placement.on_training(job) if self.placement is not None else {}
            moved = self._move(job, S.TRAINING, "launching", Actor.SYSTEM, {"run_started_at": self.clock(), **placed})
            if moved is None:
                return self._left_run(self.repository.get(job_id))
            job = moved
        if job.status not in RUNNING or job.run_handle:
            return self._left_run(job) if job.status not in RUNNING else self._wait_instructions(job)
        try:
            run_spec = self.specs.run_spec(job, job.attempt, None)
        except ValueError as exc:
            return self._fail(job, ErrorType.USER_ERROR, str(exc))
        spot, zone, preferences = launch_choice(job)
        pools = fleet_pools(job)
        request = LaunchRequest(
            job_id=job.job_id,
            attempt=job.attempt,
            owner=job.owner,
            run_spec=run_spec,
            run_spec_uri=self.specs.s3_uri(constants.run_spec_key(job.job_id, job.attempt)),
            labels=dict(job.labels),
            preemptible=spot,
            max_runtime_seconds=job.scheduling_config.max_runtime_seconds,
            zone=zone,
            instance_preferences=preferences,
            fleet_pools=pools,
        )
        launcher = self.launchers[self.config.launcher]
        try:
            handle = launcher.launch(request)
        except CapacityRefused as exc:
            # An EC2 Fleet's pools that had none: each blocked, then the run ends as a capacity error (requeue).
            self._record_launch(job, None, None, exc.failures)
            description = RunDescription(state=RunState.FAILED, error_type=ErrorType.CAPACITY, message=f"launch failed: {exc}")
            return self._after_end(job.job_id, job.attempt, description)
        except InvalidRequest as exc:
            # The launch-time checks (a custom image the deployment no longer allows, ...): the job's error, not capacity.
            description = RunDescription(state=RunState.FAILED, error_type=ErrorType.USER_ERROR, message=f"launch refused: {exc}")
            return self._after_end(job.job_id, job.attempt, description)
        except Exception as exc:
            logger.exception("launch failed", extra={"job_id": job_id})
            return self._after_end(
                job.job_id,
                job.attempt,
                RunDescription(state=RunState.FAILED, error_type=ErrorType.CAPACITY, message=f"launch failed: {exc}"),
            )
        # Record the handle, then look again (unversioned, as for tokens): a cancel that decided before
        # this write found no handle to stop, so this task stops the run; one deciding after finds it.
        self.repository.annotate(job_id, {"run_handle": handle.to_dict()})
        if pools:
            landed = handle.extra.get("instance_type"), handle.extra.get("zone") or None
            self._record_launch(job, *landed, PoolFailure.from_extra(handle.extra))
        current = self.repository.get(job_id)
        if current.attempt != job.attempt or (current.status not in RUNNING and not current.run_outcome):
            launcher.stop(handle, graceful=False)
            return self._left_run(current)
        job = current
        if job.pending_action is not None and job.status in RUNNING:
            # A pause or preemption landed while launching: act on it now that there is a run to stop.
            self.runs.stop_run(job, graceful=True, reason=job.pending_reason or str(job.pending_action))
        return self._wait_instructions(job)

    def _record_launch(self, job: Job, instance_type: str | None, zone: str | None, failures: Sequence[PoolFailure]) -> None:
        """Placement's record of an EC2 Fleet launch: the pools that failed, the one it landed in."""
        placed = self.placement.on_launched(job, instance_type, zone, failures) if self.placement is not None else {}
        if placed:
            self.repository.annotate(job.job_id, placed)

    def wait_run(self, job_id: str, execution: str | None, token: str) -> dict[str, Any]:
        job = self.repository.get(job_id)
        if not self._superseded(job, execution) and job.status in RUNNING and not job.run_outcome:
            # Store, then look again: on_run_finished writes its decision, then reads the token. Of two
            # such write-then-read pairs one always sees the other's write, so the wait is answered.
            self.repository.annotate(job_id, {"task_token": token, "task_token_kind": WaitKind.RUN})
            job = self.repository.get(job_id)
            if not self._superseded(job, execution) and job.status in RUNNING and not job.run_outcome:
                return {"next": Next.WAITING}
        if self._superseded(job, execution):
            answer: dict[str, Any] = {"next": Next.ENDED}
        elif job.run_outcome:
            answer = {"next": job.run_outcome}  # decided before this wait could hear it
        else:
            answer = self._left_run(job)
        self.tokens.send_success(token, answer)
        return {"next": Next.ANSWERED}

    def wait_resume(self, job_id: str, execution: str | None, token: str) -> dict[str, Any]:
        job = self._store_token(job_id, execution, token, WaitKind.RESUME, waiting_in=frozenset({S.PAUSED}))
        return {"next": Next.ANSWERED if job is None else Next.WAITING}

    def run_timeout(self, job_id: str, execution: str | None) -> dict[str, Any]:
        """WaitForRun timed out (no heartbeat, or max runtime passed): find out where the run stands."""
        job = self.repository.get(job_id)
        if self._superseded(job, execution):
            return {"next": Next.ENDED}
        if job.run_outcome:
            return {"next": job.run_outcome}
        if job.status not in RUNNING:
            return self._left_run(job)
        limit = job.scheduling_config.max_runtime_seconds
        if limit and job.run_started_at and (self.clock() - job.run_started_at).total_seconds() >= limit:
            self.runs.stop_run(job, graceful=True, reason="max_runtime_seconds reached")
            message = f"the run exceeded scheduling_config.max_runtime_seconds={limit}"
            return self._after_end(
                job_id, job.attempt, RunDescription(state=RunState.FAILED, error_type=ErrorType.TIMEOUT, message=message)
            )
        description = self._describe(job)
        if description.state in {RunState.STARTING, RunState.RUNNING, RunState.STOPPING}:
            return self._wait_instructions(job)
        return self._after_end(job_id, job.attempt, description)

    def crash(self, job_id: str, execution: str | None, error: Mapping[str, Any] | None) -> dict[str, Any]:
        job = self.repository.get(job_id)
        if self._superseded(job, execution):
            return {"next": Next.ENDED}
        message = f"lifecycle error: {(error or {}).get('Error', 'unknown')}: {str((error or {}).get('Cause', ''))[:500]}"
        if job.run_handle and job.status in RUNNING:
            self.runs.stop_run(job, graceful=False, reason=message)
        if job.status not in TERMINAL and job.status != S.PAUSED:
            self._move(job, S.FAILED, message, Actor.SYSTEM, {"error_type": ErrorType.INTERNAL, "error_message": message})
        self._release(self.repository.get(job_id))
        return {"next": Next.FAILED}

    # ================================================================ the run's end
    def on_run_finished(self, job_id: str, attempt: int, run: RunDescription) -> None:
        """The run of `attempt` ended (launcher monitor, EventBridge, reconciler): decide and answer the wait."""
        outcome = self._after_end(job_id, attempt, run)
        job = self.repository.get(job_id)
        if self.sweep_hooks is not None:
            self.sweep_hooks.on_job_changed(job)
        if job.attempt == attempt and job.task_token and job.task_token_kind == WaitKind.RUN and outcome.get("next") != Next.IGNORED:
            self.tokens.send_success(job.task_token, outcome)

    # ================================================================ internals
    def _after_end(self, job_id: str, attempt: int, run: RunDescription) -> dict[str, Any]:
        placed: dict[str, Any] | None = None
        for _ in range(_RACE_RETRIES):
            job = self.repository.get(job_id)
            if job.attempt != attempt:
                return {"next": Next.IGNORED}
            if job.run_outcome:
                return {"next": job.run_outcome}  # already decided (duplicate report)
            if job.status not in RUNNING:
                if job.status == S.CANCELLED and job.run_started_at is not None:
                    # A cancel lands before its run's end: the attempt still ran (and a budget meters it).
                    self._record_cost(job, attempt, run)
                released = self._left_run(job)
                return released
            self._catch_up_before_end(job, run)
            self._record_cost(job, attempt, run)
            decision = decide_run_end(job, run, max_preemptions=self.config.max_preemptions)
            changes = {**decision.changes, "run_outcome": decision.next, "pending_action": None, "pending_reason": None}
            if self.placement is not None:
                # Once per run end: a lost race re-decides, but must not count the pool's failure twice.
                placed = self.placement.on_run_end(job, run) if placed is None else placed
                changes.update(placed)
            if (moved := self._move(job, decision.status, decision.reason, decision.actor, changes)) is not None:
                ended = self.repository.get(job_id)  # with the attempt's cost and final progress
                self._release(ended)
                if moved.status == S.COMPLETED:
                    self._completed(ended)
                return {"next": decision.next}
        raise TransientError(f"run end of {job_id}: kept losing races")

    def _completed(self, job: Job) -> None:
        if self.completions is None:
            return
        try:
            self.completions(job)
        except Exception:
            # Bookkeeping: the forecast missing one job never undoes the completion already written.
            logger.exception("the forecast did not learn from %s", job.job_id)

    def _catch_up_before_end(self, job: Job, run: RunDescription) -> None:
        """The run's checkpoints and progress from S3 before its end is decided: a pause lands with the
        checkpoint it saved even if that report is still in flight (or lost)."""
        try:
            self.catch_up(job.job_id, completed=run.state == RunState.COMPLETED)
        except Exception:
            # Bookkeeping: never let it keep a run's end from being decided (the reconciler retries).
            logger.exception("catching %s up from S3 failed", job.job_id)

    def _record_cost(self, job: Job, attempt: int, run: RunDescription) -> None:
        """Price the attempt before its end is decided (idempotent per attempt: every reporter may call it)."""
        costs.price_attempt(self.repository, job, attempt, run, now=self.clock())

    def _store_token(self, job_id: str, execution: str | None, token: str, kind: str, *, waiting_in: frozenset[JobStatus]) -> Job | None:
        """Store a wait's token while the job is still where it waits; else answer the token now (None).

        Unversioned (annotate): a wait beginning must never make a user's verb lose its race (409). The
        verb writes its decision then reads the token (Workflow.answer_wait); this stores the token then
        reads the status; one of the two always sees the other's write.
        """
        job = self.repository.get(job_id)
        if not self._superseded(job, execution) and job.status in waiting_in:
            self.repository.annotate(job_id, {"task_token": token, "task_token_kind": kind})
            job = self.repository.get(job_id)
            if not self._superseded(job, execution) and job.status in waiting_in:
                return job
        self.tokens.send_success(token, {"next": Next.ENDED if self._superseded(job, execution) else self._answer_for(job, kind)})
        return None

    def _answer_for(self, job: Job, kind: str) -> Next:
        if kind == WaitKind.RESUME and job.status == S.QUEUED:
            return Next.RESUME  # resumed before the wait began
        if kind == WaitKind.CAPACITY and job.status in RUNNING:
            return Next.GO
        return Next.FAILED if job.status == S.FAILED else Next.ENDED

    def _left_run(self, job: Job) -> dict[str, Any]:
        """The job is no longer where this task expected it (cancelled, failed...): tidy up and stop routing."""
        self._release(job)
        if job.status == S.FAILED:
            return {"next": Next.FAILED}
        if job.status == S.PAUSED:
            return {"next": Next.PAUSED}
        return {"next": Next.ENDED}

    def _release(self, job: Job) -> None:
        if job.status in RUNNING or not job.capacity_pool:
            return
        # capacity_pool stays on the job as a record of where it ran; the ledger is what holds capacity.
        try:
            if self.scheduler.release(job):
                self.scheduler.run_pass()
        except Exception:
            # Never let bookkeeping block the decision already written: the reconciler frees orphan claims.
            logger.exception("releasing the capacity of %s failed", job.job_id)

    def _fail(self, job: Job, error_type: ErrorType, message: str) -> dict[str, Any]:
        moved = self._move(job, S.FAILED, message, Actor.SYSTEM, {"error_type": error_type, "error_message": message})
        self._release(moved or self.repository.get(job.job_id))
        return {"next": Next.FAILED}

    def _move(self, job: Job, to: JobStatus, reason: str, actor: Actor, changes: Mapping[str, Any], *, quiet: bool = False) -> Job | None:
        """One conditional transition; None if another writer got there first (the caller re-reads)."""
        try:
            return self.repository.transition(
                Transition(
                    job_id=job.job_id,
                    expected_version=job.version,
                    from_status=job.status,
                    to_status=to,
                    reason=reason,
                    actor=actor.value,
                    changes=dict(changes),
                )
            )
        except (ConcurrentModification, IllegalTransition) as exc:
            if not quiet:
                logger.info("transition lost its race", extra={"job_id": job.job_id, "to": to.value, "error": str(exc)})
            return None

    def _superseded(self, job: Job, execution: str | None) -> bool:
        """A task of an execution that is no longer the job's (the reconciler started a newer one)."""
        if not execution:
            return False
        if job.execution_arn is None:
            self.repository.annotate(job.job_id, {"execution_arn": execution})
            return False
        return job.execution_arn != execution

    def _describe(self, job: Job) -> RunDescription:
        if not job.run_handle:
            return RunDescription(state=RunState.UNKNOWN, message="no run was recorded for this attempt")
        handle = LaunchHandle.from_dict(job.run_handle)
        launcher = self.launchers.get(handle.launcher)
        if launcher is None:
            return RunDescription(state=RunState.UNKNOWN, message=f"no {handle.launcher} launcher in this deployment")
        return launcher.describe(handle)

    def _wait_instructions(self, job: Job) -> dict[str, Any]:
        limit = job.scheduling_config.max_runtime_seconds
        if limit:
            elapsed = (self.clock() - job.run_started_at).total_seconds() if job.run_started_at else 0.0
            timeout = int(max(limit - elapsed, 0)) + self.config.stop_grace_seconds + self.config.timeout_margin_seconds
        else:
            timeout = self.config.no_timeout_seconds
        heartbeat = min(self.config.heartbeat_seconds, timeout - 1)
        return {"next": Next.WAIT, "timeout_seconds": timeout, "heartbeat_seconds": heartbeat}
