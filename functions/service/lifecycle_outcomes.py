"""What the end of a run means for its job: one pure decision, so every path (launcher monitor,
EventBridge, reconciler, timeout) decides the same way.

- exit 0 -> COMPLETED
- stopped with a checkpoint (exit 75): pause -> PAUSED; scheduler preemption -> QUEUED (back in line);
  no request of ours (an external SIGTERM, a spot interruption notice) -> PREEMPTED
- stopped because it would pass scheduling_config.max_cost_usd (error_type BUDGET written on the
  running job by the budget check) -> FAILED with BUDGET, never retried
- a failure: retryable user-code errors with max_retries left -> QUEUED, else FAILED with error_type
- lost (spot reclaimed, instance or process gone) -> PREEMPTED, resumed automatically while the job's
  preemption budget lasts; this never spends max_retries
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from functions.service.ports import RunDescription, RunState
from schemas.job import Actor, ErrorType, Job, PendingAction
from schemas.lifecycle import Next
from schemas.status import PAUSABLE, JobStatus, can_transition

S = JobStatus
RETRYABLE = frozenset({ErrorType.USER_ERROR, ErrorType.INTERNAL, ErrorType.OUT_OF_MEMORY, ErrorType.CAPACITY})


@dataclass(frozen=True)
class RunEndDecision:
    status: JobStatus
    next: Next  # what the state machine does next (its RunOutcome choice)
    reason: str
    actor: Actor = Actor.SYSTEM
    changes: dict[str, Any] = field(default_factory=dict)


def decide_run_end(job: Job, run: RunDescription, *, max_preemptions: int) -> RunEndDecision:
    decision = _decide(job, run, max_preemptions)
    if not can_transition(job.status, decision.status):
        # e.g. a pause that could not land because the trainer had moved on to EXPORTING
        message = f"run ended ({run.state.value}) while {job.status.value}: {run.message or 'no detail'}"
        return RunEndDecision(S.FAILED, Next.FAILED, message, changes={"error_type": ErrorType.INTERNAL, "error_message": message})
    return decision


def _decide(job: Job, run: RunDescription, max_preemptions: int) -> RunEndDecision:
    detail = f": {run.message}" if run.message else ""
    pending = job.pending_action
    if run.state == RunState.COMPLETED:
        return RunEndDecision(S.COMPLETED, Next.COMPLETED, "training finished", Actor.TRAINER, {"error_type": None, "error_message": None})
    if job.error_type == ErrorType.BUDGET:
        # The budget check stopped this run: however it ended after that, the budget is why.
        message = job.error_message or "scheduling_config.max_cost_usd reached"
        budget = {"error_type": ErrorType.BUDGET, "error_message": message}
        return RunEndDecision(S.FAILED, Next.FAILED, f"{ErrorType.BUDGET.value}: {message}", Actor.SYSTEM, budget)
    if run.state == RunState.FAILED:
        return _failure(job, run.error_type or ErrorType.USER_ERROR, run.message or "the trainer failed")
    lost = run.state in {RunState.PREEMPTED, RunState.UNKNOWN}
    if pending == PendingAction.PAUSE and job.status in PAUSABLE:
        why = job.pending_reason or "paused by request"
        if lost:
            why += f" (the run was lost before it confirmed{detail}; resuming uses the latest checkpoint)"
        return RunEndDecision(S.PAUSED, Next.PAUSED, why, Actor.USER, {"resume_checkpoint_id": None})
    if pending == PendingAction.PREEMPT and not lost:
        why = job.pending_reason or "preempted by the scheduler"
        return RunEndDecision(S.QUEUED, Next.REQUEUE, why, Actor.SCHEDULER, {"resume_checkpoint_id": None})
    if pending == PendingAction.CANCEL:
        return RunEndDecision(S.CANCELLED, Next.ENDED, job.pending_reason or "cancelled", Actor.USER)
    # Stopped by nobody we know of, or lost: a preemption. Resumed automatically within its own budget.
    count = job.preemptions + 1
    what = "stopped from outside the control plane" if run.state == RunState.STOPPED else "the run was lost"
    changes: dict[str, Any] = {"preemptions": count, "error_type": ErrorType.PREEMPTED, "error_message": f"{what}{detail}"}
    if count > max_preemptions:
        changes["error_message"] += f"; preemption budget ({max_preemptions}) spent, not resuming"
        return RunEndDecision(S.PREEMPTED, Next.ENDED, f"{what}{detail}; preemption budget spent", changes=changes)
    return RunEndDecision(
        S.PREEMPTED,
        Next.RESUME_PREEMPTED,
        f"{what}{detail}; resuming from the latest checkpoint ({count}/{max_preemptions})",
        changes=changes,
    )


def _failure(job: Job, error_type: ErrorType, message: str) -> RunEndDecision:
    changes: dict[str, Any] = {"error_type": error_type, "error_message": message}
    if error_type == ErrorType.CAPACITY and job.resource_config.placement is not None and not _waited_too_long(job):
        # Not the job's fault and other candidates remain: the pool is blocked (functions/service/placement.py)
        # and the next attempt takes the next healthy candidate, without spending max_retries.
        changes["resume_checkpoint_id"] = None
        return RunEndDecision(
            S.QUEUED, Next.REQUEUE, f"capacity: {message}; trying the next healthy placement candidate", Actor.SYSTEM, changes
        )
    budget = job.training_config.max_retries
    if error_type in RETRYABLE and job.retries_used < budget:
        changes["retries_used"] = job.retries_used + 1
        changes["resume_checkpoint_id"] = None
        reason = f"{error_type.value}: {message}; retry {job.retries_used + 1}/{budget} from the latest checkpoint"
        return RunEndDecision(S.QUEUED, Next.REQUEUE, reason, Actor.SYSTEM, changes)
    return RunEndDecision(S.FAILED, Next.FAILED, f"{error_type.value}: {message}", Actor.TRAINER, changes)


def _waited_too_long(job: Job) -> bool:
    """resource_config.placement's max_wait_seconds (for a first placement) or deadline has passed."""
    placement = job.resource_config.placement
    if placement is None:
        return False
    now = datetime.now(UTC)
    if placement.deadline is not None and now >= placement.deadline:
        return True
    started = job.placement is not None and job.placement.time_to_first_step_seconds is not None
    return placement.max_wait_seconds is not None and not started and (now - job.created_at).total_seconds() > placement.max_wait_seconds
